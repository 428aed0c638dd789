//! Placement: which physical GPUs a session that asked for a number of them (`gpupool run
//! --gpus N`, `GPUPOOL_GPUS`, or its tenant's `devices = N`) is given. The session then sees
//! exactly those, as its devices 0..N-1 in the order chosen (the hello's device list; the
//! client numbers the list it gets), and every other GPU is refused as a device that does not
//! exist ([`super::dispatch`]'s `check_device`).
//!
//! The wiring is learnt once at start-up through the backend's NVML
//! ([`Topology::discover`]): NVLink islands from `nvmlDeviceGetNvLinkState` and
//! `nvmlDeviceGetNvLinkRemotePciInfo_v2` (devices joined by active links, transitively),
//! PCIe switches and NUMA nodes from `nvmlDeviceGetTopologyCommonAncestor` (pairs at
//! `NVML_TOPOLOGY_MULTIPLE` or nearer share a switch; at `NVML_TOPOLOGY_NODE` or nearer a
//! NUMA node). The policy itself ([`choose`]) is a pure function of that wiring and of each
//! device's state, documented in README.md ("Placement"). This module owns no session state;
//! what is committed where is read from the live sessions' [`super::SessionInfo`].

use crate::backend::Nvml;
use std::os::raw::c_uint;

pub use gpupool_quota::Placement as Policy;

/// NVML's `nvmlGpuTopologyLevel_t` values that bound a domain (nvml.h).
const LEVEL_MULTIPLE: u32 = 20;
const LEVEL_NODE: u32 = 40;
const LEVEL_SYSTEM: u32 = 50;

/// Per GPU, None without NVLink; else per link index, the GPU at the far end of an active link.
pub type Links = Vec<Option<Vec<Option<u32>>>>;

/// How the GPUs (daemon ordinals 0..n) are wired.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Topology {
    /// Per GPU, the NVLink island it belongs to (None: no active NVLink).
    pub island: Vec<Option<usize>>,
    /// Per pair, NVML's common-ancestor level (SYSTEM where NVML could not say).
    pub level: Vec<Vec<u32>>,
    /// Per GPU, None without NVLink; else per link index (as many as NVML answered), the GPU at
    /// the far end of an active link (None: inactive, or no GPU of this daemon there).
    pub links: Links,
}

impl Topology {
    /// `n` GPUs about which nothing is known: no NVLink, every pair SYSTEM.
    pub fn unknown(n: usize) -> Topology {
        Topology { island: vec![None; n], level: vec![vec![LEVEL_SYSTEM; n]; n], links: vec![None; n] }
    }

    /// Asks NVML about GPUs `uuids` (daemon ordinal order, NVML's `GPU-...` strings). A query
    /// NVML refuses leaves that part unknown, with a log line.
    pub fn discover(nvml: &Nvml, uuids: &[String]) -> Topology {
        let n = uuids.len();
        let mut topo = Topology::unknown(n);
        let handles: Vec<_> = uuids.iter().map(|u| nvml.handle_by_uuid(u)).collect();
        let Some(handles) = handles.into_iter().collect::<anyhow::Result<Vec<_>>>().ok() else {
            tracing::warn!("placement: NVML does not know every GPU; topology unknown");
            return topo;
        };
        let pci: Vec<_> = handles.iter().map(|&h| nvml.pci_address(h).ok()).collect();
        let mut parent: Vec<usize> = (0..n).collect();
        fn root(p: &mut [usize], mut i: usize) -> usize {
            while p[i] != i {
                p[i] = p[p[i]];
                i = p[i];
            }
            i
        }
        let mut linked = vec![false; n];
        for (a, &h) in handles.iter().enumerate() {
            for (b, &hb) in handles.iter().enumerate() {
                match nvml.common_ancestor(h, hb) {
                    Ok(l) => topo.level[a][b] = l,
                    Err(e) if a == 0 && b == 1 => tracing::info!("placement: no PCIe topology from NVML: {e:#}"),
                    Err(_) => {}
                }
            }
            let mut links = Vec::new();
            for link in 0..gpupool_shim::nvml::NVML_NVLINK_MAX_LINKS as c_uint {
                match nvml.nvlink_remote(h, link) {
                    Ok(Some(remote)) => {
                        let far = pci.iter().position(|p| *p == Some(remote));
                        if let Some(b) = far {
                            linked[a] = true;
                            linked[b] = true;
                            let (ra, rb) = (root(&mut parent, a), root(&mut parent, b));
                            parent[ra] = rb;
                        }
                        links.push(far.map(|b| b as u32));
                    }
                    Ok(None) => links.push(None),
                    // No NVLink on this device (NOT_SUPPORTED), or past its last link.
                    Err(_) => break,
                }
            }
            topo.links[a] = (!links.is_empty()).then_some(links);
        }
        let mut ids: Vec<usize> = Vec::new();
        for (d, &on) in linked.iter().enumerate() {
            if on {
                let r = root(&mut parent, d);
                let id = ids.iter().position(|&x| x == r).unwrap_or_else(|| {
                    ids.push(r);
                    ids.len() - 1
                });
                topo.island[d] = Some(id);
            }
        }
        tracing::info!(islands = ?topo.island, levels = ?topo.level, "placement: GPU topology from NVML");
        topo
    }

    /// The wiring of `gpus` (daemon ordinals, a session's order) as that session sees it: levels
    /// between them, and links to GPUs outside `gpus` shown as inactive (the others do not
    /// exist for the session). Ordinals this topology does not know are SYSTEM, without NVLink.
    pub fn seen_by(&self, gpus: &[u32]) -> (Vec<Vec<u32>>, Links) {
        let level = gpus
            .iter()
            .map(|&a| {
                gpus.iter()
                    .map(|&b| {
                        self.level.get(a as usize).and_then(|r| r.get(b as usize)).copied().unwrap_or(LEVEL_SYSTEM)
                    })
                    .collect()
            })
            .collect();
        let links = gpus
            .iter()
            .map(|&a| {
                let links = self.links.get(a as usize)?.as_ref()?;
                let pos = |far: u32| gpus.iter().position(|&g| g == far).map(|p| p as u32);
                Some(links.iter().map(|far| far.and_then(pos)).collect())
            })
            .collect();
        (level, links)
    }

    /// The groups of GPUs whose every pair is at `level` or nearer (single-linkage on an
    /// ultrametric, as NVML's PCIe tree gives).
    fn groups_within(&self, level: u32) -> Vec<Vec<u32>> {
        let mut groups: Vec<Vec<u32>> = Vec::new();
        for d in 0..self.level.len() {
            match groups.iter_mut().find(|g| self.level[g[0] as usize][d] <= level) {
                Some(g) => g.push(d as u32),
                None => groups.push(vec![d as u32]),
            }
        }
        groups
    }

    fn islands(&self) -> Vec<Vec<u32>> {
        let mut groups: Vec<Vec<u32>> = Vec::new();
        let count = self.island.iter().flatten().max().map_or(0, |m| m + 1);
        for i in 0..count {
            groups.push((0..self.island.len() as u32).filter(|&d| self.island[d as usize] == Some(i)).collect());
        }
        groups
    }
}

/// One GPU as placement sees it now.
#[derive(Clone, Debug, PartialEq)]
pub struct DeviceState {
    pub total: u64,
    /// Memory promised to the sessions placed on it (their quotas there), or in use by
    /// sessions that were not placed, whichever is more.
    pub committed: u64,
    /// Sessions placed on it now.
    pub sessions: usize,
    /// Device time charged over the last second, 0..=1.
    pub load: f64,
}

/// Chooses `n` GPUs for a session whose memory quota on device d is `need(d)` (None:
/// unlimited, which needs the whole device), or says why it cannot. Order of the answer: the
/// session's devices 0..n-1.
///
/// 1. Memory: a device is a candidate only if `need` is not 0 and fits beside what it has
///    committed.
/// 2. Topology, for n > 1: the n devices come from one NVLink island if some island has n
///    candidates, else from one PCIe switch, else one NUMA node, else anywhere; among the
///    domains that can hold them, binpack takes the one with the most committed memory,
///    spread the one with the least (then the lowest device).
/// 3. Within the domain, devices in policy order: binpack the most committed memory first,
///    spread the fewest placed sessions first, then least committed memory, then the NVLink
///    island / NUMA node with the fewest placed sessions (so consecutive one-GPU jobs alternate
///    between islands); both then the lowest compute load, then the lowest ordinal.
pub fn choose(
    topo: &Topology,
    policy: Policy,
    n: usize,
    devices: &[DeviceState],
    need: impl Fn(u32) -> Option<u64>,
) -> Result<Vec<u32>, String> {
    if n == 0 {
        return Err("0 GPUs asked for".into());
    }
    if n > devices.len() {
        return Err(format!("{n} GPUs asked for; the daemon has {}", devices.len()));
    }
    // A GPU where the session's quota is 0 (a per-device quota that leaves it out, a container
    // not given it) is no candidate: the session could not use it.
    let fits = |d: u32| {
        let s = &devices[d as usize];
        let need = need(d).unwrap_or(s.total);
        need > 0 && need <= s.total.saturating_sub(s.committed)
    };
    let candidates: Vec<u32> = (0..devices.len() as u32).filter(|&d| fits(d)).collect();
    if candidates.len() < n {
        let why: Vec<String> = (0..devices.len() as u32)
            .filter(|&d| !fits(d))
            .map(|d| {
                let s = &devices[d as usize];
                let need = need(d).map_or("the whole device".to_string(), |b| format!("{} MiB", b >> 20));
                format!(
                    "GPU {d}: {need} asked, {} MiB free of {} MiB",
                    (s.total - s.committed.min(s.total)) >> 20,
                    s.total >> 20
                )
            })
            .collect();
        return Err(format!("{n} GPUs asked for, {} can hold the memory quota ({})", candidates.len(), why.join("; ")));
    }
    // Placed sessions per NVLink island (or NUMA node, for a device on no island): spread
    // alternates between them.
    let numa = topo.groups_within(LEVEL_NODE);
    let domain_sessions = |d: u32| -> usize {
        let group: Vec<u32> = match topo.island.get(d as usize).copied().flatten() {
            Some(i) => (0..topo.island.len() as u32).filter(|&x| topo.island[x as usize] == Some(i)).collect(),
            None => numa.iter().find(|g| g.contains(&d)).cloned().unwrap_or_else(|| vec![d]),
        };
        group.iter().map(|&x| devices[x as usize].sessions).sum()
    };
    let order = |list: &mut Vec<u32>| {
        list.sort_by(|&a, &b| {
            let (sa, sb) = (&devices[a as usize], &devices[b as usize]);
            let first = match policy {
                Policy::Binpack => sb.committed.cmp(&sa.committed),
                Policy::Spread => (sa.sessions, sa.committed, domain_sessions(a)).cmp(&(
                    sb.sessions,
                    sb.committed,
                    domain_sessions(b),
                )),
            };
            // partial_cmp: an idle device's load may be -0.0 (an empty f64 sum), equal to 0.0.
            let load = sa.load.partial_cmp(&sb.load).unwrap_or(std::cmp::Ordering::Equal);
            first.then(load).then(a.cmp(&b))
        });
    };
    if n == 1 {
        let mut list = candidates;
        order(&mut list);
        return Ok(vec![list[0]]);
    }
    let everything = vec![(0..devices.len() as u32).collect::<Vec<_>>()];
    for domains in [topo.islands(), topo.groups_within(LEVEL_MULTIPLE), numa.clone(), everything] {
        let mut fitting: Vec<Vec<u32>> = domains
            .into_iter()
            .map(|g| g.into_iter().filter(|d| candidates.contains(d)).collect::<Vec<_>>())
            .filter(|g| g.len() >= n)
            .collect();
        if fitting.is_empty() {
            continue;
        }
        let committed = |g: &Vec<u32>| g.iter().map(|&d| devices[d as usize].committed).sum::<u64>();
        fitting.sort_by(|a, b| {
            let by = match policy {
                Policy::Binpack => committed(b).cmp(&committed(a)),
                Policy::Spread => committed(a).cmp(&committed(b)),
            };
            by.then(a[0].cmp(&b[0]))
        });
        let mut chosen = fitting.swap_remove(0);
        order(&mut chosen);
        chosen.truncate(n);
        return Ok(chosen);
    }
    unreachable!("the whole machine holds the candidates, and there are at least n")
}

/// How many GPUs a session is placed on: its tenant's `devices`, narrowed by the client's
/// request (`GPUPOOL_GPUS`); None: no placement, every device visible.
pub fn wanted(tenant: Option<u32>, asked: Option<u32>, session: u64) -> Option<u32> {
    match (tenant, asked) {
        (Some(t), Some(a)) if a > t => {
            tracing::info!(
                session,
                asked = a,
                granted = t,
                "placement: GPUs asked for clamped to the tenant's `devices`"
            );
            Some(t)
        }
        (_, Some(a)) => Some(a),
        (t, None) => t,
    }
}

/// Places a new session on `n` GPUs, given the sessions placed so far (the caller holds their
/// lock and records the answer under it, so two sessions never take the same room). Returns
/// the GPUs, in the session's order, and its quota on each; or the CUDA error code and why.
pub fn place(
    shared: &super::Shared,
    sessions: &std::collections::BTreeMap<u64, super::SessionInfo>,
    n: u32,
    quota: &gpupool_quota::MemoryQuota,
) -> Result<(Vec<u32>, Vec<u64>), (u32, String)> {
    let gpus = shared.first_npu() as usize;
    let snapshot = shared.ledger.snapshot(gpus as u32);
    let usage = shared.compute.usage();
    let mut states: Vec<DeviceState> = (0..gpus)
        .map(|d| {
            let load = usage.get(d).map_or(0.0, |u| u.iter().map(|t| t.share_1s).sum::<f64>()).min(1.0);
            DeviceState { total: shared.devices[d].total_memory, committed: 0, sessions: 0, load }
        })
        .collect();
    for s in sessions.values() {
        for (&d, &q) in s.placement.iter().flatten().zip(&s.placed_quota) {
            if let Some(st) = states.get_mut(d as usize) {
                st.committed = st.committed.saturating_add(q);
                st.sessions += 1;
            }
        }
    }
    // Memory in use beyond what the placed sessions were promised (clients that were not
    // placed) is committed too.
    for (st, used) in states.iter_mut().zip(snapshot_used(&snapshot, gpus)) {
        st.committed = st.committed.max(used);
    }
    let policy = shared.placement_flag.or(shared.ledger.config().placement).unwrap_or_default();
    let need = |d: u32| quota.for_device(d);
    let chosen = choose(&shared.topology, policy, n as usize, &states, need).map_err(|why| {
        let code = if n as usize > gpus { super::dispatch::INVALID_DEVICE } else { OUT_OF_MEMORY };
        (code, format!("placement ({policy:?}) failed: {why}"))
    })?;
    let seen: Vec<_> = states.iter().map(|s| (s.committed >> 20, s.sessions, (s.load * 100.0).round())).collect();
    tracing::info!(?policy, n, ?chosen, committed_mib_sessions_load = ?seen, "placement");
    let quotas = chosen.iter().map(|&d| need(d).unwrap_or(states[d as usize].total)).collect();
    Ok((chosen, quotas))
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, prometheus_client::encoding::EncodeLabelSet)]
struct PlacementLabels {
    session: String,
    tenant: String,
    /// The daemon's ordinal of the GPU.
    device: String,
    uuid: String,
    /// `gpu`, as every device-labelled family says (placement is of GPUs only).
    kind: String,
    /// The session's own number for it.
    index: String,
}

/// `gpupool_session_placement`: 1 per (placed session, GPU), from the status document.
pub fn register_metrics(reg: &mut prometheus_client::registry::Registry, doc: &serde_json::Value) {
    use prometheus_client::metrics::{family::Family, gauge::Gauge};
    let family = Family::<PlacementLabels, Gauge>::default();
    for s in doc["sessions"].as_array().into_iter().flatten() {
        for (index, d) in s["placement"].as_array().into_iter().flatten().enumerate() {
            let device = d.as_u64().unwrap_or(0);
            let labels = PlacementLabels {
                session: s["id"].to_string(),
                tenant: s["tenant"].as_str().unwrap_or("?").to_string(),
                device: device.to_string(),
                uuid: doc["devices"][device as usize]["uuid"].as_str().unwrap_or("").to_string(),
                kind: doc["devices"][device as usize]["kind"].as_str().unwrap_or("gpu").to_string(),
                index: index.to_string(),
            };
            family.get_or_create(&labels).set(1);
        }
    }
    reg.register("session_placement", "A GPU a session was placed on (1), and its index in the session", family);
}

/// CUDA_ERROR_OUT_OF_MEMORY: no set of GPUs has room for the session's quota.
const OUT_OF_MEMORY: u32 = 2;

fn snapshot_used(snapshot: &gpupool_quota::LedgerSnapshot, gpus: usize) -> Vec<u64> {
    (0..gpus as u32)
        .map(|d| snapshot.tenants.iter().filter_map(|t| t.devices.iter().find(|x| x.device == d)).map(|x| x.used).sum())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: u64 = 1 << 30;

    /// Eight GPUs: NVLink islands 0-3 and 4-7, switches of two, NUMA nodes of four.
    fn eight() -> Topology {
        let level = |a: usize, b: usize| match (a, b) {
            _ if a == b => 0,
            _ if a / 2 == b / 2 => 10,
            _ if a / 4 == b / 4 => 40,
            _ => 50,
        };
        Topology {
            island: (0..8).map(|d| Some(d / 4)).collect(),
            level: (0..8).map(|a| (0..8).map(|b| level(a, b)).collect()).collect(),
            // Each GPU's links 0..2 lead to the other three of its island, link 3 is inactive.
            links: (0..8u32)
                .map(|d| {
                    let peers = (d / 4 * 4..d / 4 * 4 + 4).filter(|&p| p != d).map(Some);
                    Some(peers.chain([None]).collect())
                })
                .collect(),
        }
    }

    #[test]
    fn a_session_sees_the_wiring_of_its_own_gpus_only() {
        let (level, links) = eight().seen_by(&[5, 4, 0]);
        assert_eq!(level, [[0, 10, 50], [10, 0, 50], [50, 50, 0]]);
        // GPU 5's links lead to 4 (its GPU 1), 6 and 7 (not its own: shown inactive); GPU 4's
        // first link to 5 (its GPU 0).
        assert_eq!(links[0], Some(vec![Some(1), None, None, None]));
        assert_eq!(links[1], Some(vec![Some(0), None, None, None]));
        assert_eq!(links[2], Some(vec![None, None, None, None]));
        let unknown = Topology::unknown(2).seen_by(&[1, 7]);
        assert_eq!(unknown, (vec![vec![50, 50], vec![50, 50]], vec![None, None]));
    }

    fn idle(n: usize) -> Vec<DeviceState> {
        vec![DeviceState { total: GIB, committed: 0, sessions: 0, load: 0.0 }; n]
    }

    /// Places `jobs` one-GPU jobs of `quota` bytes one after another, as sessions arriving.
    fn place_ones(policy: Policy, jobs: usize, quota: u64) -> Vec<u32> {
        let (topo, mut devs) = (eight(), idle(8));
        (0..jobs)
            .map(|_| {
                let d = choose(&topo, policy, 1, &devs, |_| Some(quota)).unwrap()[0];
                devs[d as usize].committed += quota;
                devs[d as usize].sessions += 1;
                d
            })
            .collect()
    }

    #[test]
    fn binpack_fills_a_device_before_the_next_and_spread_alternates_islands() {
        assert_eq!(place_ones(Policy::Binpack, 6, 256 << 20), [0, 0, 0, 0, 1, 1]);
        assert_eq!(place_ones(Policy::Spread, 6, 256 << 20), [0, 4, 1, 5, 2, 6]);
    }

    #[test]
    fn a_four_gpu_job_stays_in_one_island_and_skips_a_device_that_cannot_hold_it() {
        let (topo, mut devs) = (eight(), idle(8));
        assert_eq!(choose(&topo, Policy::Binpack, 4, &devs, |_| Some(GIB)).unwrap(), [0, 1, 2, 3]);
        // Island 0 with a device too full for the quota: the job goes whole to island 1.
        devs[2].committed = 768 << 20;
        assert_eq!(choose(&topo, Policy::Binpack, 4, &devs, |_| Some(512 << 20)).unwrap(), [4, 5, 6, 7]);
        // Two candidates per island: a pair still takes one island (the first, all being equal),
        // a triple no longer fits one and spans them.
        devs[1].committed = 768 << 20;
        devs[5].committed = 768 << 20;
        devs[6].committed = 768 << 20;
        assert_eq!(choose(&topo, Policy::Binpack, 2, &devs, |_| Some(512 << 20)).unwrap(), [0, 3]);
        assert!(choose(&topo, Policy::Binpack, 3, &devs, |_| Some(512 << 20)).unwrap().iter().all(|&d| d != 1));
        let err = choose(&topo, Policy::Spread, 6, &devs, |_| Some(512 << 20)).unwrap_err();
        assert!(err.contains("4 can hold"), "{err}");
    }

    #[test]
    fn without_nvlink_a_pair_stays_behind_one_switch_then_one_numa_node() {
        let mut topo = eight();
        topo.island = vec![None; 8];
        let mut devs = idle(8);
        devs[0].committed = GIB;
        assert_eq!(choose(&topo, Policy::Spread, 2, &devs, |_| Some(GIB)).unwrap(), [2, 3]);
        devs[3].committed = GIB;
        devs[5].committed = GIB;
        devs[7].committed = GIB;
        // No switch has two free devices: one NUMA node (node 0 has 1 and 2 free).
        assert_eq!(choose(&topo, Policy::Binpack, 2, &devs, |_| Some(GIB)).unwrap(), [1, 2]);
        // An unlimited quota needs a whole, empty device.
        assert_eq!(choose(&topo, Policy::Binpack, 1, &devs, |_| None).unwrap(), [1]);
        assert!(choose(&Topology::unknown(8), Policy::Spread, 9, &idle(8), |_| None).is_err());
        // A GPU the quota gives nothing is never chosen, however empty.
        let zero_on_first_two = |d: u32| Some(if d < 2 { 0 } else { GIB });
        assert_eq!(choose(&Topology::unknown(8), Policy::Binpack, 1, &idle(8), zero_on_first_two).unwrap(), [2]);
        // Lower load breaks a tie; -0.0 (an empty sum) and 0.0 are the same load.
        let mut devs = idle(8);
        devs[0].load = -0.0;
        devs[1].load = 0.25;
        assert_eq!(choose(&Topology::unknown(8), Policy::Spread, 1, &devs, |_| None).unwrap(), [0]);
        devs[0].load = 0.5;
        assert_eq!(choose(&Topology::unknown(8), Policy::Spread, 1, &devs, |_| None).unwrap(), [2]);
    }
}
