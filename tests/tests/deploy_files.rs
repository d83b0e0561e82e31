//! The deployment files under `deploy/` (and the `Dockerfile`) cannot run
//! here, so this holds them to what can be checked: every YAML file parses,
//! and the Kubernetes probes, ports and config, the systemd unit and the
//! image agree with the host's contract (the paths it serves, the port its
//! config listens on, the signals it handles).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use leasehold_host::config::{Config, Environment};
use serde_json::Value;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the repository root")
        .to_path_buf()
}

fn read(relative: &str) -> String {
    let path = repo().join(relative);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Every `.yaml`/`.yml` file under `dir`, recursively.
fn yaml_files(dir: &Path, found: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            yaml_files(&path, found);
        } else if path
            .extension()
            .is_some_and(|ext| ext == "yaml" || ext == "yml")
        {
            found.push(path);
        }
    }
}

/// Every document of a YAML file, as JSON values.
fn documents(path: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).unwrap();
    serde_norway::Deserializer::from_str(&text)
        .map(|document| {
            serde::Deserialize::deserialize(document)
                .unwrap_or_else(|e| panic!("{} does not parse: {e}", path.display()))
        })
        .collect()
}

/// Every Kubernetes object under deploy/kubernetes, by kind and name.
fn kubernetes() -> BTreeMap<(String, String), Value> {
    let mut files = Vec::new();
    yaml_files(&repo().join("deploy/kubernetes"), &mut files);
    let mut objects = BTreeMap::new();
    for file in files {
        for object in documents(&file) {
            let kind = object["kind"].as_str().expect("kind").to_string();
            let name = object["metadata"]["name"]
                .as_str()
                .expect("metadata.name")
                .to_string();
            assert!(
                object["apiVersion"].is_string(),
                "{kind} {name} has no apiVersion"
            );
            objects.insert((kind, name), object);
        }
    }
    objects
}

fn object<'a>(objects: &'a BTreeMap<(String, String), Value>, kind: &str, name: &str) -> &'a Value {
    objects
        .get(&(kind.to_string(), name.to_string()))
        .unwrap_or_else(|| panic!("no {kind} {name} under deploy/kubernetes"))
}

/// The paths the host's API serves, from its OpenAPI document (which a
/// host test holds to the router).
fn served_paths() -> Vec<String> {
    let document: Value = serde_json::from_str(&read("docs/openapi.json")).unwrap();
    document["paths"]
        .as_object()
        .expect("paths")
        .keys()
        .cloned()
        .collect()
}

#[test]
fn every_yaml_file_under_deploy_parses() {
    let mut files = Vec::new();
    yaml_files(&repo().join("deploy"), &mut files);
    assert!(files.len() >= 6, "{files:?}");
    for file in &files {
        let docs = documents(file);
        assert!(!docs.is_empty(), "{} is empty", file.display());
        for doc in docs {
            assert!(doc.is_object(), "{}: {doc}", file.display());
        }
    }
}

#[test]
fn kubernetes_probes_ports_and_config_agree_with_the_contract() {
    let objects = kubernetes();
    let deployment = object(&objects, "Deployment", "leasehold");
    assert!(
        deployment["spec"]["replicas"].as_u64().unwrap() >= 2,
        "at least two replicas, so every controller has a standby"
    );
    let pod = &deployment["spec"]["template"];
    let pod_labels = &pod["metadata"]["labels"];
    assert_eq!(
        &deployment["spec"]["selector"]["matchLabels"], pod_labels,
        "the Deployment selects its own pods"
    );
    let containers = pod["spec"]["containers"].as_array().unwrap();
    let host = containers
        .iter()
        .find(|c| c["name"] == "leasehold")
        .expect("a leasehold container");

    // The config the pods read: the ConfigMap's copy of leasehold.toml,
    // loaded by the host's own parser.
    let configmap = object(&objects, "ConfigMap", "leasehold");
    let shipped = configmap["data"]["leasehold.toml"].as_str().unwrap();
    assert_eq!(
        shipped,
        read("deploy/kubernetes/leasehold.toml"),
        "configmap.yaml holds deploy/kubernetes/leasehold.toml unchanged"
    );
    // The image's component folder, stood in for by empty files of the
    // same names (loading checks that they exist; compiling them is
    // `leasehold check`'s job on a real deployment).
    let components = leasehold_tests::TempDir::new();
    for line in shipped.lines().filter(|l| l.starts_with("component")) {
        let file = line.rsplit('/').next().unwrap().trim_end_matches('"');
        std::fs::write(components.path().join(file), b"").unwrap();
    }
    let env = Environment {
        database_url: None,
        guest_dir: Some(components.path().to_path_buf()),
        ..Default::default()
    };
    let config = Config::parse_with(shipped, "/etc/leasehold", &env)
        .unwrap_or_else(|e| panic!("the shipped config does not load: {e}"));
    let listen_port = config.http.listen.port();
    assert!(
        !config.http.listen.ip().is_loopback(),
        "probes reach the pod IP: the API must not listen on loopback only"
    );

    // The container port named in the probes is the one the host listens on.
    let ports = host["ports"].as_array().unwrap();
    let port_of = |probe_port: &Value| -> u64 {
        match probe_port {
            Value::Number(n) => n.as_u64().unwrap(),
            Value::String(name) => ports
                .iter()
                .find(|p| p["name"] == name.as_str())
                .unwrap_or_else(|| panic!("no container port named {name}"))["containerPort"]
                .as_u64()
                .unwrap(),
            other => panic!("a probe port is a number or a name, not {other}"),
        }
    };
    let served = served_paths();
    for (probe, path) in [("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")] {
        let get = &host[probe]["httpGet"];
        assert_eq!(get["path"], path, "{probe}");
        assert_eq!(
            port_of(&get["port"]),
            u64::from(listen_port),
            "{probe} port"
        );
        assert!(
            served.iter().any(|p| p == path),
            "{path} is not a path the host serves"
        );
    }
    if let Some(startup) = host.get("startupProbe") {
        let path = startup["httpGet"]["path"].as_str().unwrap();
        assert!(served.iter().any(|p| p == path), "startupProbe {path}");
        assert_eq!(port_of(&startup["httpGet"]["port"]), u64::from(listen_port));
    }
    // Prometheus is pointed at /metrics on the same port.
    let annotations = &pod["metadata"]["annotations"];
    assert_eq!(annotations["prometheus.io/path"], "/metrics");
    assert!(served.iter().any(|p| p == "/metrics"));
    assert_eq!(
        annotations["prometheus.io/port"].as_str().unwrap(),
        listen_port.to_string()
    );

    // The host reads the ConfigMap as a directory mount (a subPath mount
    // would never see an edit), at the folder of its --config file.
    let args: Vec<&str> = host["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    let config_arg = args[args.iter().position(|a| *a == "--config").unwrap() + 1];
    let config_dir = Path::new(config_arg).parent().unwrap();
    let mount = host["volumeMounts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| Path::new(m["mountPath"].as_str().unwrap()) == config_dir)
        .expect("the config folder is mounted");
    assert!(
        mount.get("subPath").is_none(),
        "no subPath: edits must reach the pod"
    );
    let volume = pod["spec"]["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == mount["name"])
        .expect("the mounted volume");
    assert_eq!(volume["configMap"]["name"], "leasehold");
    assert_eq!(args[0], "run");

    // Reload on change: a sidecar that can signal the host's process.
    assert_eq!(pod["spec"]["shareProcessNamespace"], true);
    let reload = containers
        .iter()
        .find(|c| c["name"] == "reload")
        .expect("a reload sidecar");
    let script = reload["command"].to_string();
    assert!(script.contains("-HUP"), "{script}");
    assert!(script.contains(config_arg), "{script}");

    // The database URL comes from a Secret, never the ConfigMap.
    assert!(!shipped.contains("password"), "{shipped}");
    let url_env = host["env"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == "LEASEHOLD_DATABASE_URL")
        .expect("LEASEHOLD_DATABASE_URL");
    assert!(url_env["valueFrom"]["secretKeyRef"].is_object());
    // Each replica's holder is its pod's name; the shipped config names none.
    let holder_env = host["env"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == leasehold_host::config::HOLDER_ENV)
        .expect("the holder name from the pod");
    assert_eq!(
        holder_env["valueFrom"]["fieldRef"]["fieldPath"],
        "metadata.name"
    );
    assert!(
        !shipped
            .lines()
            .any(|l| l.trim_start().starts_with("holder")),
        "{shipped}"
    );

    // Non-root everywhere.
    let job = object(&objects, "Job", "leasehold-migrate");
    for (what, spec) in [
        ("Deployment", &pod["spec"]),
        ("Job", &job["spec"]["template"]["spec"]),
    ] {
        assert_eq!(spec["securityContext"]["runAsNonRoot"], true, "{what}");
        assert_ne!(spec["securityContext"]["runAsUser"], 0, "{what}");
    }
    let migrate = &job["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(migrate["args"][0], "migrate");

    // The disruption budget covers these pods and leaves one up.
    let pdb = object(&objects, "PodDisruptionBudget", "leasehold");
    assert_eq!(&pdb["spec"]["selector"]["matchLabels"], pod_labels);
    let min = pdb["spec"]["minAvailable"].as_u64().unwrap();
    assert!(
        (1..deployment["spec"]["replicas"].as_u64().unwrap()).contains(&min),
        "minAvailable {min} must leave room to drain a node"
    );

    // The Service reaches the same port.
    let service = object(&objects, "Service", "leasehold");
    assert_eq!(&service["spec"]["selector"], pod_labels);
    assert_eq!(
        port_of(&service["spec"]["ports"][0]["targetPort"]),
        u64::from(listen_port)
    );
}

/// `Key=value` settings of one unit file section, in order.
fn unit_settings(unit: &str, section: &str) -> Vec<(String, String)> {
    let mut current = String::new();
    let mut settings = Vec::new();
    for line in unit.lines().map(str::trim) {
        if line.starts_with('#') || line.is_empty() {
            continue;
        }
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            current = name.to_string();
        } else if current == section {
            let (key, value) = line.split_once('=').expect("Key=value");
            settings.push((key.to_string(), value.to_string()));
        }
    }
    settings
}

#[test]
fn the_systemd_unit_uses_the_hosts_notifications_and_signals() {
    let unit = read("deploy/systemd/leasehold.service");
    let service = unit_settings(&unit, "Service");
    let get = |key: &str| {
        service
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
            .unwrap_or_else(|| panic!("[Service] {key} is missing"))
    };
    assert_eq!(get("Type"), "notify");
    assert_eq!(get("KillSignal"), "SIGTERM");
    assert_eq!(get("ExecReload"), "/bin/kill -HUP $MAINPID");
    assert!(
        get("ExecStart").contains(" run --config "),
        "{}",
        get("ExecStart")
    );
    assert!(
        get("WatchdogSec")
            .trim_end_matches('s')
            .parse::<u64>()
            .unwrap()
            > 0
    );
    assert_eq!(get("NoNewPrivileges"), "yes");
    assert_eq!(get("ProtectSystem"), "strict");
    // wasmtime writes the guests' native code into memory it then runs.
    assert_eq!(get("MemoryDenyWriteExecute"), "no");
    assert!(!unit_settings(&unit, "Install").is_empty());
}

#[test]
fn the_image_is_multi_stage_and_runs_the_host_as_non_root() {
    let dockerfile = read("Dockerfile");
    let instructions: Vec<&str> = dockerfile
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect();
    let stages = instructions
        .iter()
        .filter(|l| l.starts_with("FROM "))
        .count();
    assert!(stages >= 2, "a build stage and a run stage");
    let last_from = instructions
        .iter()
        .rposition(|l| l.starts_with("FROM "))
        .unwrap();
    let run_stage = &instructions[last_from..];
    let user = run_stage
        .iter()
        .filter_map(|l| l.strip_prefix("USER "))
        .next_back()
        .expect("the run stage sets USER");
    let uid = user.split(':').next().unwrap();
    assert!(uid != "0" && uid != "root", "USER {user}");
    // Only what the host needs is copied into the run stage.
    for copy in run_stage.iter().filter(|l| l.starts_with("COPY ")) {
        assert!(copy.starts_with("COPY --from=build "), "{copy}");
    }
    let entrypoint = run_stage
        .iter()
        .find_map(|l| l.strip_prefix("ENTRYPOINT "))
        .expect("ENTRYPOINT");
    assert!(
        entrypoint.contains("/usr/local/bin/leasehold"),
        "{entrypoint}"
    );
    // The components the shipped config names are in the image.
    let config = read("deploy/kubernetes/leasehold.toml");
    for line in config.lines().filter(|l| l.starts_with("component")) {
        let file = line.rsplit('/').next().unwrap().trim_end_matches('"');
        assert!(dockerfile.contains(file), "{file} is not in the image");
    }
}
