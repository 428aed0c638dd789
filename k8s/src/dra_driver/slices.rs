//! The node's ResourceSlice: one device per device of the daemon, named after its UUID so that
//! a device keeps its name when the daemon's ordinals shift, with its attributes (vendor, model,
//! type, index, uuid, compute capability) and its consumable capacity (`memory`
//! in bytes, `compute` in percent). `allowMultipleAllocations` lets the scheduler place several
//! claims on one device up to that capacity (DRA consumable capacity, Kubernetes 1.34+): a claim
//! asks `capacity.requests: {memory: 512Mi, compute: "20"}`; one that asks nothing gets the whole
//! device (the request policies' defaults).
//!
//! A device the daemon stops reporting (or reports unhealthy) stays in the slice with the taint
//! [`LOST_TAINT`] (`NoSchedule`: no new claim lands on it; claims already there are the
//! workload's to judge), and loses it when the daemon reports it healthy again. The publisher
//! remembers every device it has seen; a publisher restarted while a device is gone no longer
//! knows it, and the device simply is not offered.
//!
//! Must not: decide what a device can hold (the daemon's status document says), or write
//! anything but this node's slice.

use crate::node::Device;
use k8s_openapi::api::resource::v1::{
    CapacityRequestPolicy, CapacityRequestPolicyRange, Device as SliceDevice, DeviceAttribute, DeviceCapacity,
    DeviceTaint, ResourcePool, ResourceSlice, ResourceSliceSpec,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use std::collections::BTreeMap;

/// The taint a device the daemon lost carries (`gpupool.io/device-lost`).
pub const LOST_TAINT: &str = "gpupool.io/device-lost";
/// Capacity names (in the driver's domain: `device.capacity["gpupool.io"].memory`).
pub const CAP_MEMORY: &str = "memory";
pub const CAP_COMPUTE: &str = "compute";

/// The ResourceSlice device name of `d`.
pub fn slice_name_of(d: &Device) -> String {
    device_name(&d.kind, &d.uuid)
}

/// `gpu-<uuid without its GPU- prefix>`, lower case, at most 63 characters.
pub fn device_name(kind: &str, uuid: &str) -> String {
    let id = uuid.split_once('-').filter(|(p, _)| p.chars().all(|c| c.is_ascii_alphabetic())).map_or(uuid, |(_, r)| r);
    let mut name: String = format!("{kind}-{id}")
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c.to_ascii_lowercase() } else { '-' })
        .collect();
    name.truncate(63);
    name.trim_end_matches('-').to_string()
}

/// Every device seen since start, by UUID, with whether the daemon has it now.
#[derive(Clone, Default)]
pub struct Seen {
    seen: BTreeMap<String, Device>,
    present: BTreeMap<String, bool>,
}

impl Seen {
    /// Takes the daemon's current devices; `None`: the daemon did not answer (every device is
    /// then lost). Returns whether anything published changed.
    pub fn update(&mut self, now: Option<Vec<Device>>) -> bool {
        let before = (self.seen.clone(), self.present.clone());
        for p in self.present.values_mut() {
            *p = false;
        }
        if let Some(devices) = now {
            for d in devices {
                self.present.insert(d.uuid.clone(), d.healthy);
                self.seen.insert(d.uuid.clone(), d);
            }
        }
        before != (self.seen.clone(), self.present.clone())
    }

    /// The slice's devices, in ordinal order (lost devices carry [`LOST_TAINT`]).
    pub fn devices(&self) -> Vec<SliceDevice> {
        let mut all: Vec<&Device> = self.seen.values().collect();
        all.sort_by_key(|d| (d.ordinal, d.uuid.clone()));
        all.into_iter().map(|d| device(d, self.present.get(&d.uuid).copied().unwrap_or(false))).collect()
    }
}

fn string(s: &str) -> DeviceAttribute {
    DeviceAttribute { string: Some(s.to_string()), ..Default::default() }
}

/// A quantity of bytes: `<n>Mi` where exact, else plain bytes.
pub fn bytes_quantity(b: u64) -> Quantity {
    Quantity(if b.is_multiple_of(1 << 20) { format!("{}Mi", b >> 20) } else { b.to_string() })
}

fn device(d: &Device, healthy: bool) -> SliceDevice {
    let mut attributes = BTreeMap::from([
        ("type".to_string(), string(&d.kind)),
        ("vendor".to_string(), string(if d.kind == "npu" { "huawei" } else { "nvidia" })),
        ("model".to_string(), string(&d.name)),
        ("uuid".to_string(), string(&d.uuid)),
        ("index".to_string(), DeviceAttribute { int: Some(d.ordinal as i64), ..Default::default() }),
    ]);
    if d.kind == "gpu" {
        // A semantic version, so that CEL can compare it: "9.0" becomes 9.0.0.
        let cc = format!("{}.0", d.compute_capability);
        attributes.insert("computeCapability".into(), DeviceAttribute { version: Some(cc), ..Default::default() });
    }
    let capacity = BTreeMap::from([
        (
            CAP_MEMORY.to_string(),
            DeviceCapacity {
                value: bytes_quantity(d.total_memory),
                request_policy: Some(CapacityRequestPolicy {
                    default: Some(bytes_quantity(d.total_memory)),
                    valid_range: Some(CapacityRequestPolicyRange {
                        min: Quantity("1Mi".into()),
                        max: None,
                        step: Some(Quantity("1Mi".into())),
                    }),
                    valid_values: None,
                }),
            },
        ),
        (
            CAP_COMPUTE.to_string(),
            DeviceCapacity {
                value: Quantity("100".into()),
                request_policy: Some(CapacityRequestPolicy {
                    default: Some(Quantity("100".into())),
                    valid_range: Some(CapacityRequestPolicyRange {
                        min: Quantity("1".into()),
                        max: Some(Quantity("100".into())),
                        step: Some(Quantity("1".into())),
                    }),
                    valid_values: None,
                }),
            },
        ),
    ]);
    SliceDevice {
        name: slice_name_of(d),
        attributes: Some(attributes),
        capacity: Some(capacity),
        allow_multiple_allocations: Some(true),
        taints: (!healthy).then(|| {
            vec![DeviceTaint {
                key: LOST_TAINT.into(),
                value: Some("true".into()),
                effect: "NoSchedule".into(),
                time_added: None,
            }]
        }),
        ..Default::default()
    }
}

/// The slice's name for `node`.
pub fn slice_name(node: &str) -> String {
    format!("{node}-{}", super::DRIVER)
}

/// This node's slice: one pool named after the node, `generation` bumped by the publisher on
/// every change, owned by the Node object (so it goes when the node does).
pub fn slice(node: &str, node_uid: Option<&str>, generation: i64, devices: Vec<SliceDevice>) -> ResourceSlice {
    ResourceSlice {
        metadata: ObjectMeta {
            name: Some(slice_name(node)),
            owner_references: node_uid.map(|uid| {
                vec![OwnerReference {
                    api_version: "v1".into(),
                    kind: "Node".into(),
                    name: node.into(),
                    uid: uid.into(),
                    controller: Some(true),
                    block_owner_deletion: None,
                }]
            }),
            ..Default::default()
        },
        spec: ResourceSliceSpec {
            driver: super::DRIVER.into(),
            node_name: Some(node.into()),
            pool: ResourcePool { name: node.into(), generation, resource_slice_count: 1 },
            devices: Some(devices),
            ..Default::default()
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn status(healthy1: bool) -> Value {
        json!({
            "daemon": {"driver_version": 12040},
            "devices": [
                {"ordinal": 0, "kind": "gpu", "name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-0a1b2c3d-0000-1111-2222-333344445555",
                 "total_memory": 85u64 << 30, "compute_capability": "9.0"},
                {"ordinal": 1, "kind": "gpu", "name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-ffffffff-0000-1111-2222-333344445555",
                 "total_memory": (85u64 << 30) + 5, "compute_capability": "9.0", "healthy": healthy1},
            ]
        })
    }

    #[test]
    fn devices_carry_attributes_capacity_and_sharing() {
        let mut inv = Seen::default();
        assert!(inv.update(crate::node::devices_from_status(&status(true)).ok()));
        let devs = inv.devices();
        assert_eq!(devs.len(), 2);
        let d = &devs[0];
        assert_eq!(d.name, "gpu-0a1b2c3d-0000-1111-2222-333344445555");
        let a = d.attributes.as_ref().unwrap();
        assert_eq!(a["index"].int, Some(0));
        assert_eq!(a["vendor"].string.as_deref(), Some("nvidia"));
        assert_eq!(a["computeCapability"].version.as_deref(), Some("9.0.0"));
        let c = d.capacity.as_ref().unwrap();
        assert_eq!(c[CAP_MEMORY].value.0, "87040Mi");
        assert_eq!(devs[1].capacity.as_ref().unwrap()[CAP_MEMORY].value.0, ((85u64 << 30) + 5).to_string());
        assert_eq!(c[CAP_COMPUTE].value.0, "100");
        assert_eq!(d.allow_multiple_allocations, Some(true));
        assert!(d.taints.is_none());
        // Nothing changed: nothing to publish.
        assert!(!inv.update(crate::node::devices_from_status(&status(true)).ok()));
    }

    #[test]
    fn a_lost_device_is_tainted_until_it_comes_back() {
        let mut inv = Seen::default();
        inv.update(crate::node::devices_from_status(&status(true)).ok());
        // Reported unhealthy, then missing altogether, then the daemon gone: tainted, still listed.
        assert!(inv.update(crate::node::devices_from_status(&status(false)).ok()));
        assert_eq!(inv.devices()[1].taints.as_ref().unwrap()[0].key, LOST_TAINT);
        let mut one = status(true);
        one["devices"].as_array_mut().unwrap().pop();
        assert!(
            !inv.update(crate::node::devices_from_status(&one).ok()),
            "unhealthy then missing: the slice is the same"
        );
        assert_eq!(inv.devices().len(), 2);
        assert!(inv.update(None));
        assert!(inv.devices().iter().all(|d| d.taints.is_some()));
        assert!(inv.update(crate::node::devices_from_status(&status(true)).ok()));
        assert!(inv.devices().iter().all(|d| d.taints.is_none()));
    }

    #[test]
    fn names_are_dns_labels() {
        assert_eq!(device_name("gpu", "GPU-AB12-cd"), "gpu-ab12-cd");
        assert_eq!(device_name("npu", "weird_uuid"), "npu-weird-uuid");
        assert!(device_name("gpu", &"x".repeat(100)).len() <= 63);
        let s = slice("node-1", Some("u1"), 3, vec![]);
        assert_eq!(s.metadata.name.as_deref(), Some("node-1-gpupool.io"));
        assert_eq!((s.spec.pool.name.as_str(), s.spec.pool.generation), ("node-1", 3));
    }
}
