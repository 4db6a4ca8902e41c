#!/usr/bin/env bash
# The deployment manifests under deploy/ (Kubernetes and Prometheus), checked without a
# cluster: every YAML parses; every object has its required fields; the DaemonSet has what
# rocsd needs (hostPID, /sys read-only, /dev, /run/rocs, its ConfigMaps); the metrics port
# agrees between rocsd.toml, the pod and the scrape configurations; the image is the package's
# (name rocs, tag the workspace's version); `rocsd --check` accepts the ConfigMap's rocsd.toml
# and policies; `promtool check config` accepts the scrape configurations (when installed).
# Takes a second once rocsd is built (it uses target/debug/rocsd, building it when missing).
set -euo pipefail
cd "$(dirname "$0")/.."

python=python3
if ! "$python" -c 'import yaml' 2>/dev/null; then
    python=/usr/bin/python3
    if ! "$python" -c 'import yaml' 2>/dev/null; then
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-yaml >/dev/null
    fi
fi
[ -x target/debug/rocsd ] || cargo build --quiet --locked -p rocsd
check_dir=$(mktemp -d)
trap 'rm -rf "$check_dir"' EXIT

"$python" - "$check_dir" <<'EOF'
import glob, os, re, subprocess, sys, tomllib
import yaml

check_dir = sys.argv[1]
failures = []


def check(ok, what):
    if not ok:
        failures.append(what)
    return ok


with open("Cargo.toml", "rb") as f:
    version = tomllib.load(f)["workspace"]["package"]["version"]
with open("daemon/Cargo.toml", "rb") as f:
    package = tomllib.load(f)["package"]["metadata"]["deb"]["name"]

# Every YAML parses; Kubernetes objects by kind and name.
objects = {}
for path in sorted(glob.glob("deploy/**/*.y*ml", recursive=True)):
    try:
        with open(path) as f:
            docs = [d for d in yaml.safe_load_all(f) if d is not None]
    except yaml.YAMLError as e:
        check(False, f"{path}: not YAML: {e}")
        continue
    print(f"{path}: {len(docs)} document(s)")
    if not path.startswith("deploy/kubernetes/"):
        continue
    for doc in docs:
        where = f"{path}: {doc.get('kind')} {doc.get('metadata', {}).get('name')}"
        check(doc.get("apiVersion") and doc.get("kind"), f"{where}: no apiVersion or kind")
        if doc.get("kind") == "Kustomization":
            objects[("Kustomization", path)] = doc
            continue
        meta = doc.get("metadata") or {}
        check(meta.get("name"), f"{where}: no metadata.name")
        if doc.get("kind") != "Namespace":
            check(meta.get("namespace") == "rocs-system", f"{where}: not in namespace rocs-system")
        objects[(doc["kind"], meta.get("name"))] = doc

for kind, name in [("Namespace", "rocs-system"), ("DaemonSet", "rocsd"),
                   ("ConfigMap", "rocsd-config"), ("ConfigMap", "rocsd-policies")]:
    check((kind, name) in objects, f"no {kind} {name} in deploy/kubernetes/")
if failures:
    sys.exit("\n".join(["FAIL: " + f for f in failures]))

# The DaemonSet: what rocsd needs, and nothing dangling.
ds = objects[("DaemonSet", "rocsd")]
pod = ds["spec"]["template"]
spec = pod["spec"]
labels = pod["metadata"]["labels"]
for k, v in ds["spec"]["selector"]["matchLabels"].items():
    check(labels.get(k) == v, f"DaemonSet selector {k}={v} does not select its own pods")
check(spec.get("hostPID") is True, "DaemonSet: hostPID must be true (the node's processes are the targets)")
for where, meta in [("DaemonSet", ds["metadata"]), ("pod template", pod["metadata"])]:
    check(meta["labels"].get("app.kubernetes.io/version") == version,
          f"{where}: label app.kubernetes.io/version is not {version}")
volumes = {v["name"]: v for v in spec["volumes"]}
containers = {c["name"]: c for c in spec["containers"]}
check("rocsd" in containers, "DaemonSet: no container rocsd")
for c in spec["containers"]:
    image = c["image"]
    name, _, tag = image.rpartition(":")
    check(name.rsplit("/", 1)[-1] == package and tag == version,
          f"container {c['name']}: image {image} is not {package}:{version} (the package's)")
    for m in c.get("volumeMounts", []):
        check(m["name"] in volumes, f"container {c['name']}: mount of undeclared volume {m['name']}")
for v in volumes.values():
    if "configMap" in v:
        check(("ConfigMap", v["configMap"]["name"]) in objects,
              f"volume {v['name']}: ConfigMap {v['configMap']['name']} is not in deploy/kubernetes/")

rocsd = containers["rocsd"]
mounts = {m["mountPath"]: m for m in rocsd["volumeMounts"]}
def host_path(mount_path):
    m = mounts.get(mount_path)
    return m and volumes[m["name"]].get("hostPath", {}).get("path")
check(host_path("/sys") == "/sys" and mounts["/sys"].get("readOnly") is True,
      "rocsd: the host's /sys must be mounted read-only at /sys")
check(host_path("/dev") == "/dev", "rocsd: the host's /dev must be mounted (for /dev/rocs_shim)")
check(host_path("/run/rocs") == "/run/rocs", "rocsd: /run/rocs (the control socket) must be the host's")
check(rocsd.get("securityContext", {}).get("privileged") is True,
      "rocsd: must be privileged (the device cgroup denies /dev/rocs_shim otherwise)")
config_mount = mounts.get("/etc/rocs/rocsd.toml")
check(config_mount and volumes[config_mount["name"]].get("configMap", {}).get("name") == "rocsd-config"
      and config_mount.get("subPath") == "rocsd.toml",
      "rocsd: /etc/rocs/rocsd.toml must be rocsd-config's rocsd.toml")
command = rocsd.get("command", []) + rocsd.get("args", [])
check(command[-2:] == ["--config", "/etc/rocs/rocsd.toml"], f"rocsd: runs {command}, not with its config")
for c in spec["containers"]:
    m = {m["mountPath"]: m for m in c.get("volumeMounts", [])}.get("/etc/rocs/policy.d")
    check(m and volumes[m["name"]].get("configMap", {}).get("name") == "rocsd-policies",
          f"container {c['name']}: /etc/rocs/policy.d must be the ConfigMap rocsd-policies")
    if c is not rocsd:
        check("rocsctl reload" in " ".join(c.get("command", [])),
              f"container {c['name']}: does not reload rocsd's policies")

# The metrics port: rocsd.toml, the pod, its annotations, the PodMonitor, the scrape config.
rocsd_toml = tomllib.loads(objects[("ConfigMap", "rocsd-config")]["data"]["rocsd.toml"])
port = int(rocsd_toml["metrics"].rsplit(":", 1)[1])
ports = {p.get("name"): p["containerPort"] for p in rocsd.get("ports", [])}
check(ports.get("metrics") == port, f"rocsd: containerPort 'metrics' is not rocsd.toml's {port}")
annotations = pod["metadata"].get("annotations", {})
check(annotations.get("prometheus.io/scrape") == "true" and annotations.get("prometheus.io/port") == str(port),
      f"pod template: prometheus.io annotations do not say scrape on {port}")
podmonitor = yaml.safe_load(open("deploy/kubernetes/podmonitor.yaml"))
check(all(e["port"] in ports for e in podmonitor["spec"]["podMetricsEndpoints"]),
      "PodMonitor: scrapes a port the pod does not name")
check(podmonitor["spec"]["selector"]["matchLabels"].items() <= labels.items(),
      "PodMonitor: its selector does not select rocsd's pods")
scrape = yaml.safe_load(open("deploy/prometheus/kubernetes.yml"))
k8s_job = {j["job_name"]: j for j in scrape["scrape_configs"]}.get("rocsd-kubernetes", {})
check(k8s_job.get("kubernetes_sd_configs", [{}])[0].get("namespaces", {}).get("names") == ["rocs-system"],
      "kubernetes.yml: job rocsd-kubernetes does not look in namespace rocs-system")
check(any(r.get("regex") == "metrics" and r.get("action") == "keep" for r in k8s_job.get("relabel_configs", [])),
      "kubernetes.yml: job rocsd-kubernetes does not keep the port named metrics")

# kustomize: every resource exists, the image override keeps the package's version.
kustomization = objects[("Kustomization", "deploy/kubernetes/kustomization.yaml")]
for r in kustomization["resources"]:
    check(os.path.exists(os.path.join("deploy/kubernetes", r)), f"kustomization: {r} does not exist")
for img in kustomization.get("images", []):
    check(img.get("newTag") == version, f"kustomization: image {img['name']} newTag is not {version}")
    check(any(c["image"].rpartition(":")[0] == img["name"] for c in spec["containers"]),
          f"kustomization: image {img['name']} names no container's image")

# The ConfigMap's rocsd.toml and policies, as rocsd reads them (policy_dir moved to a copy),
# on the sim platform (one simulated workload), so that the check does not depend on whether
# this machine has a hardware PMU.
policy_dir = os.path.join(check_dir, "policy.d")
os.mkdir(policy_dir)
for name, text in objects[("ConfigMap", "rocsd-policies")]["data"].items():
    check(name.endswith(".toml"), f"rocsd-policies: {name} is not a .toml (rocsd would skip it)")
    with open(os.path.join(policy_dir, name), "w") as f:
        f.write(text)
config = re.sub(r'(?m)^policy_dir = .*$', f'policy_dir = "{policy_dir}"',
                objects[("ConfigMap", "rocsd-config")]["data"]["rocsd.toml"])
config += '\n[[sim.workload]]\nname = "art-like"\n'
with open(os.path.join(check_dir, "rocsd.toml"), "w") as f:
    f.write(config)
run = subprocess.run(["target/debug/rocsd", "--check", "--platform", "sim", "--config",
                      os.path.join(check_dir, "rocsd.toml")], capture_output=True, text=True)
names = [tomllib.loads(t)["name"] for t in objects[("ConfigMap", "rocsd-policies")]["data"].values()]
check(run.returncode == 0 and run.stdout.rstrip().endswith("policies: " + ", ".join(names)),
      f"rocsd --check of the ConfigMaps: {run.stdout}{run.stderr}")
print(f"rocsd --check of the ConfigMaps: {run.stdout.strip()}")

if failures:
    sys.exit("\n".join(["FAIL: " + f for f in failures]))
print(f"manifests: image {package}:{version}, metrics port {port}, {len(objects)} objects")
EOF

if command -v promtool >/dev/null; then
    promtool check config deploy/prometheus/hosts.yml
    # Debian's Prometheus has no Kubernetes discovery: its promtool cannot read that job.
    if ! out=$(promtool check config deploy/prometheus/kubernetes.yml 2>&1); then
        grep -q 'field kubernetes_sd_configs not found' <<<"$out" || {
            echo "$out"
            exit 1
        }
        echo "this promtool has no Kubernetes discovery: kubernetes.yml parsed, not checked by it"
    fi
else
    echo "promtool not installed: the scrape configurations parsed, not checked by Prometheus"
fi
echo "manifests: all checks passed"
