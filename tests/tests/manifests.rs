//! deploy/kubernetes/*.yaml are what `kubectl apply` would accept: every document deserializes into its
//! k8s-openapi type (Kubernetes 1.37's schema, resource.k8s.io/v1 included) and serializes back to the
//! same JSON, which catches an unknown or misspelled field (k8s-openapi's types ignore unknown fields, so
//! a typo would otherwise vanish silently) and a value of the wrong type. The documents also agree with
//! each other: the pod's claim template exists, the claim asks for the DeviceClass of driver gpupool.io,
//! the scrape annotations name the port the daemon serves metrics on, and every mount has its volume.

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use k8s_openapi::api::resource::v1::{DeviceClass, ResourceClaimTemplate};
use serde::Deserialize;
use serde_json::Value;
use std::path::{Path, PathBuf};

fn manifests_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/kubernetes")
}

/// Every YAML document of `text`, as JSON.
fn documents(text: &str) -> Vec<Value> {
    serde_yaml_ng::Deserializer::from_str(text)
        .map(|d| Value::deserialize(d).expect("valid YAML"))
        .filter(|v| !v.is_null())
        .collect()
}

/// Deserializes `doc` as `T` and back; Err names the first difference.
fn round_trip<T: serde::de::DeserializeOwned + serde::Serialize>(doc: &Value) -> Result<Value, String> {
    let typed: T = serde_json::from_value(doc.clone()).map_err(|e| format!("does not deserialize: {e}"))?;
    let back = serde_json::to_value(&typed).map_err(|e| e.to_string())?;
    match first_difference(doc, &back, "") {
        Some(d) => Err(d),
        None => Ok(back),
    }
}

fn first_difference(a: &Value, b: &Value, at: &str) -> Option<String> {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            for (k, v) in x {
                match y.get(k) {
                    None => return Some(format!("{at}.{k}: not a field of the type (unknown or misspelled)")),
                    Some(w) => {
                        if let Some(d) = first_difference(v, w, &format!("{at}.{k}")) {
                            return Some(d);
                        }
                    }
                }
            }
            y.keys().find(|k| !x.contains_key(*k)).map(|k| format!("{at}.{k}: added by the type"))
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => {
            x.iter().zip(y).enumerate().find_map(|(i, (v, w))| first_difference(v, w, &format!("{at}[{i}]")))
        }
        _ if a == b => None,
        _ => Some(format!("{at}: {a} became {b}")),
    }
}

/// Checks `doc` against the type its apiVersion and kind name.
fn check(doc: &Value) -> Result<(), String> {
    let gvk = (doc["apiVersion"].as_str().unwrap_or(""), doc["kind"].as_str().unwrap_or(""));
    match gvk {
        ("v1", "Namespace") => round_trip::<Namespace>(doc),
        ("v1", "ServiceAccount") => round_trip::<ServiceAccount>(doc),
        ("v1", "ConfigMap") => round_trip::<ConfigMap>(doc),
        ("v1", "Pod") => round_trip::<Pod>(doc),
        ("apps/v1", "DaemonSet") => round_trip::<DaemonSet>(doc),
        ("resource.k8s.io/v1", "DeviceClass") => round_trip::<DeviceClass>(doc),
        ("resource.k8s.io/v1", "ResourceClaimTemplate") => round_trip::<ResourceClaimTemplate>(doc),
        ("rbac.authorization.k8s.io/v1", "ClusterRole") => round_trip::<ClusterRole>(doc),
        ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding") => round_trip::<ClusterRoleBinding>(doc),
        _ => Err(format!("no type known for {gvk:?}")),
    }
    .map(drop)
}

fn all_documents() -> Vec<(String, Value)> {
    let mut out = Vec::new();
    let mut files: Vec<_> = std::fs::read_dir(manifests_dir()).unwrap().map(|e| e.unwrap().path()).collect();
    files.sort();
    for p in files.into_iter().filter(|p| p.extension().is_some_and(|e| e == "yaml")) {
        for d in documents(&std::fs::read_to_string(&p).unwrap()) {
            out.push((p.file_name().unwrap().to_string_lossy().into_owned(), d));
        }
    }
    out
}

#[test]
fn every_manifest_matches_the_kubernetes_schema() {
    let docs = all_documents();
    let kinds: Vec<&str> = docs.iter().map(|(_, d)| d["kind"].as_str().unwrap()).collect();
    for k in ["DaemonSet", "DeviceClass", "ResourceClaimTemplate", "Pod", "ClusterRole", "ClusterRoleBinding"] {
        assert!(kinds.contains(&k), "no {k} among {kinds:?}");
    }
    let bad: Vec<String> = docs
        .iter()
        .filter_map(|(f, d)| check(d).err().map(|e| format!("{f}: {} {}: {e}", d["kind"], d["metadata"]["name"])))
        .collect();
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

#[test]
fn a_misspelled_or_mistyped_field_is_caught() {
    let docs = all_documents();
    let pod = &docs.iter().find(|(_, d)| d["kind"] == "Pod").unwrap().1;
    assert!(check(pod).is_ok());
    let mut typo = pod.clone();
    typo["spec"]["resourceClaim"] = typo["spec"]["resourceClaims"].take();
    typo["spec"].as_object_mut().unwrap().remove("resourceClaims");
    let e = check(&typo).unwrap_err();
    assert!(e.contains(".spec.resourceClaim:") && e.contains("unknown"), "{e}");
    let mut wrong = pod.clone();
    wrong["spec"]["containers"][0]["resources"]["claims"] = "gpu".into();
    assert!(check(&wrong).unwrap_err().contains("does not deserialize"));
    let class = &docs.iter().find(|(_, d)| d["kind"] == "DeviceClass").unwrap().1;
    let mut nested = class.clone();
    nested["spec"]["selectors"][0]["cel"]["expresion"] = nested["spec"]["selectors"][0]["cel"]["expression"].take();
    assert!(check(&nested).is_err());
}

#[test]
fn the_manifests_agree_with_each_other_and_the_daemon() {
    let docs = all_documents();
    let find = |kind: &str| &docs.iter().find(|(_, d)| d["kind"] == kind).unwrap_or_else(|| panic!("no {kind}")).1;
    let (pod, tmpl, class, ds) = (find("Pod"), find("ResourceClaimTemplate"), find("DeviceClass"), find("DaemonSet"));

    // The pod's claim comes from the template, and its container uses it.
    let claim = &pod["spec"]["resourceClaims"][0];
    assert_eq!(claim["resourceClaimTemplateName"], tmpl["metadata"]["name"]);
    assert_eq!(pod["spec"]["containers"][0]["resources"]["claims"][0]["name"], claim["name"]);
    // The template asks for the gpupool.io class, whose selector picks driver gpupool.io's devices.
    let req = &tmpl["spec"]["spec"]["devices"]["requests"][0];
    assert_eq!(req["exactly"]["deviceClassName"], class["metadata"]["name"]);
    assert_eq!(class["spec"]["selectors"][0]["cel"]["expression"], "device.driver == \"gpupool.io\"");
    let cfg = &tmpl["spec"]["spec"]["devices"]["config"][0];
    assert_eq!(cfg["requests"][0], req["name"]);
    assert_eq!(cfg["opaque"]["driver"], "gpupool.io");
    let params = &cfg["opaque"]["parameters"];
    assert_eq!((params["memoryMiB"].as_u64(), params["computePercent"].as_u64()), (Some(512), Some(20)));
    // The capacity the scheduler takes from the shared device is what the parameters ask.
    let cap = &req["exactly"]["capacity"]["requests"];
    assert_eq!((cap["memory"].as_str(), cap["compute"].as_str()), (Some("512Mi"), Some("20")));

    // The daemon: scrape annotations name the port --metrics serves; every mount has its volume.
    let t = &ds["spec"]["template"];
    assert_eq!(t["metadata"]["labels"], ds["spec"]["selector"]["matchLabels"]);
    let ann = &t["metadata"]["annotations"];
    assert_eq!(ann["prometheus.io/scrape"], "true");
    let c = &t["spec"]["containers"][0];
    let cmd: Vec<&str> = c["command"].as_array().unwrap().iter().map(|v| v.as_str().unwrap()).collect();
    assert_eq!(&cmd[1..2], ["daemon"]);
    let metrics = cmd[cmd.iter().position(|a| *a == "--metrics").unwrap() + 1];
    assert_eq!(Some(metrics.rsplit(':').next().unwrap()), ann["prometheus.io/port"].as_str());
    assert_eq!(c["ports"][0]["containerPort"].to_string(), ann["prometheus.io/port"].as_str().unwrap());
    let volumes: Vec<&str> =
        t["spec"]["volumes"].as_array().unwrap().iter().map(|v| v["name"].as_str().unwrap()).collect();
    for c in t["spec"]["containers"].as_array().unwrap().iter().chain(t["spec"]["initContainers"].as_array().unwrap()) {
        for m in c["volumeMounts"].as_array().unwrap() {
            assert!(volumes.contains(&m["name"].as_str().unwrap()), "mount {m} has no volume");
        }
    }
    // The daemon serves the host's socket directory, where the OCI hook and CDI spec look.
    let mounts = c["volumeMounts"].as_array().unwrap();
    assert!(mounts.iter().any(|m| m["mountPath"] == "/run/gpupool"));
    // The CDI spec names the daemon's executable, so it must be the host's copy under the same path.
    let bin = mounts.iter().find(|m| m["name"] == "bin").unwrap()["mountPath"].as_str().unwrap();
    assert!(cmd[0].starts_with(bin), "{} is not under {bin}", cmd[0]);
    let host_bin = t["spec"]["volumes"].as_array().unwrap().iter().find(|v| v["name"] == "bin").unwrap();
    assert_eq!(host_bin["hostPath"]["path"], bin);
}

/// The device plugin's DaemonSet runs `gpupool device-plugin` with the kubelet's plugin directory
/// and the daemon's socket directory, and its example pod asks for the resources it registers.
#[test]
fn the_device_plugin_manifest_agrees_with_the_plugin() {
    let docs: Vec<Value> =
        all_documents().into_iter().filter(|(f, _)| f == "with-device-plugin.yaml").map(|(_, d)| d).collect();
    let ds = docs.iter().find(|d| d["kind"] == "DaemonSet").expect("a DaemonSet");
    let t = &ds["spec"]["template"]["spec"];
    let c = &t["containers"][0];
    assert_eq!(c["command"][1], "device-plugin");
    let mounts: Vec<(&str, &str)> = c["volumeMounts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| (m["name"].as_str().unwrap(), m["mountPath"].as_str().unwrap()))
        .collect();
    for path in ["/var/lib/kubelet/device-plugins", "/run/gpupool"] {
        let (name, _) = *mounts.iter().find(|(_, p)| *p == path).unwrap_or_else(|| panic!("{path} not mounted"));
        let v = t["volumes"].as_array().unwrap().iter().find(|v| v["name"] == name).unwrap();
        assert_eq!(v["hostPath"]["path"], path, "the host's {path}");
    }
    let pod = docs.iter().find(|d| d["kind"] == "Pod").expect("an example pod");
    let mut asked: Vec<&String> =
        pod["spec"]["containers"][0]["resources"]["limits"].as_object().unwrap().keys().collect();
    asked.sort();
    assert_eq!(asked, ["gpupool.io/gpu", "gpupool.io/gpucores", "gpupool.io/gpumem"]);
}

/// The DRA plugin's DaemonSet (dra-plugin.yaml) runs `gpupool dra` with what it needs on the host
/// (the kubelet's plugin directories at their own paths, the daemon's socket directory, the CDI
/// directory, the host's copy of gpupool), its node's name, and a service account bound to a role
/// granting exactly the calls it makes.
#[test]
fn the_dra_plugin_has_its_mounts_its_node_and_its_rights() {
    let docs = all_documents();
    let by = |kind: &str, name: &str| {
        &docs
            .iter()
            .find(|(_, d)| d["kind"] == kind && d["metadata"]["name"] == name)
            .unwrap_or_else(|| panic!("no {kind} {name}"))
            .1
    };
    let ds = by("DaemonSet", "gpupool-dra");
    let spec = &ds["spec"]["template"]["spec"];
    let c = &spec["containers"][0];
    assert_eq!(c["command"], serde_json::json!(["/opt/gpupool/bin/gpupool", "dra"]));
    let node = c["env"].as_array().unwrap().iter().find(|e| e["name"] == "NODE_NAME").expect("NODE_NAME");
    assert_eq!(node["valueFrom"]["fieldRef"]["fieldPath"], "spec.nodeName");
    let volumes = spec["volumes"].as_array().unwrap();
    let host_path = |mount: &str| {
        let m = c["volumeMounts"].as_array().unwrap().iter().find(|m| m["mountPath"] == mount);
        let m = m.unwrap_or_else(|| panic!("{mount} is not mounted"));
        let v = volumes.iter().find(|v| v["name"] == m["name"]).unwrap_or_else(|| panic!("no volume for {m}"));
        v["hostPath"]["path"].as_str().unwrap_or_default().to_string()
    };
    // Each at the same path as on the host: the specs and the kubelet see host paths.
    for p in [
        "/var/lib/kubelet/plugins_registry",
        "/var/lib/kubelet/plugins/gpupool.io",
        "/run/gpupool",
        "/var/run/cdi",
        "/var/lib/gpupool",
        "/opt/gpupool/bin",
    ] {
        assert_eq!(host_path(p), p);
    }
    let sa = spec["serviceAccountName"].as_str().unwrap();
    let binding = by("ClusterRoleBinding", "gpupool-dra");
    assert_eq!(binding["subjects"][0]["name"], sa);
    assert_eq!(binding["subjects"][0]["namespace"], ds["metadata"]["namespace"]);
    let role = by("ClusterRole", binding["roleRef"]["name"].as_str().unwrap());
    let allows = |group: &str, resource: &str, verb: &str| {
        role["rules"].as_array().unwrap().iter().any(|r| {
            let has = |k: &str, v: &str| r[k].as_array().unwrap().iter().any(|x| x == v);
            has("apiGroups", group) && has("resources", resource) && has("verbs", verb)
        })
    };
    for (g, r, v) in [
        ("", "nodes", "get"),
        ("resource.k8s.io", "resourceslices", "get"),
        ("resource.k8s.io", "resourceslices", "create"),
        ("resource.k8s.io", "resourceslices", "patch"),
        ("resource.k8s.io", "resourceclaims", "get"),
    ] {
        assert!(allows(g, r, v), "the role does not allow {v} {r}");
    }
    assert!(!allows("resource.k8s.io", "resourceclaims", "patch"), "the plugin writes no claim");
}
