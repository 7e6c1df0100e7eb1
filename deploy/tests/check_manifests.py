#!/usr/bin/python3
"""Static checks of kiln's deployment files (no cluster, no systemd needed).

usage: /usr/bin/python3 deploy/tests/check_manifests.py [KILN_BINARY]

1. yamllint -s (deploy/.yamllint) over deploy/k8s/*.yaml;
2. every manifest parses as YAML and each document has the keys its kind needs: the
   Deployment's probes on the v2 health endpoints, preStop, a grace period covering preStop +
   drain + exit timeout, the container port equal to KILN_HTTP_PORT; the Service selecting the
   Deployment's pods; the ServingRuntime on the v2 protocol for onnx; the InferenceService using
   it; the HorizontalPodAutoscaler scaling the Deployment on kiln_queue_depth;
3. deploy/kiln-serve.service: ExecReload sends SIGHUP, TimeoutStopSec covers
   KILN_DRAIN_S + KILN_EXIT_TIMEOUT_S, and `systemd-analyze verify` accepts it (ExecStart pointed
   at KILN_BINARY, or /bin/true) when systemd-analyze is installed.
Prints one line per check and exits 1 if any failed.
"""
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile

import yaml

DEPLOY = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
failures = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        failures.append(what)


def get(doc, path):
    """doc at a dotted path ('spec.template.spec'); None when absent."""
    for key in path.split("."):
        if isinstance(doc, list):
            doc = doc[int(key)] if key.isdigit() and int(key) < len(doc) else None
        elif isinstance(doc, dict):
            doc = doc.get(key)
        else:
            return None
    return doc


def env_of(container):
    return {e["name"]: e.get("value") for e in container.get("env", []) if "name" in e}


def need(doc, name, paths):
    for p in paths:
        check(get(doc, p) is not None, f"{name}: has {p}")


def check_deployment(d, name):
    need(d, name, ["metadata.name", "spec.replicas", "spec.selector.matchLabels",
                   "spec.template.metadata.labels", "spec.template.spec.containers.0.image",
                   "spec.template.spec.terminationGracePeriodSeconds"])
    pod = get(d, "spec.template.spec") or {}
    c = (pod.get("containers") or [{}])[0]
    labels = get(d, "spec.template.metadata.labels") or {}
    sel = get(d, "spec.selector.matchLabels") or {}
    check(all(labels.get(k) == v for k, v in sel.items()), f"{name}: selector matches pod labels")
    for probe, path in (("startupProbe", "/v2/health/ready"), ("livenessProbe", "/v2/health/live"),
                        ("readinessProbe", "/v2/health/ready")):
        check(get(c, f"{probe}.httpGet.path") == path, f"{name}: {probe} on {path}")
    pre = get(c, "lifecycle.preStop.exec.command") or []
    pre_s = int(pre[-1]) if pre and str(pre[-1]).isdigit() else None
    check(pre_s is not None, f"{name}: preStop waits a number of seconds")
    env = env_of(c)
    drain, exit_s = float(env.get("KILN_DRAIN_S", "nan")), float(env.get("KILN_EXIT_TIMEOUT_S", "nan"))
    grace = pod.get("terminationGracePeriodSeconds", 0)
    check(pre_s is not None and grace >= pre_s + drain + exit_s,
          f"{name}: grace period {grace} s >= preStop {pre_s} + drain {drain} + exit {exit_s}")
    port = str(get(c, "ports.0.containerPort"))
    check(port == env.get("KILN_HTTP_PORT"), f"{name}: containerPort {port} = KILN_HTTP_PORT")
    return labels


def check_service(d, name, pod_labels):
    need(d, name, ["metadata.name", "spec.selector", "spec.ports.0.port", "spec.ports.0.targetPort"])
    sel = get(d, "spec.selector") or {}
    check(bool(sel) and all(pod_labels.get(k) == v for k, v in sel.items()),
          f"{name}: selects the Deployment's pods")


def check_runtime(d, name):
    need(d, name, ["metadata.name", "spec.supportedModelFormats.0.name", "spec.containers.0.image"])
    check("v2" in (get(d, "spec.protocolVersions") or []), f"{name}: speaks protocol v2")
    check(get(d, "spec.supportedModelFormats.0.name") == "onnx", f"{name}: serves onnx")
    c = get(d, "spec.containers.0") or {}
    args = c.get("args") or []
    check("--model-repository" in args and "/mnt/models" in args,
          f"{name}: serves KServe's /mnt/models as the repository")
    check(get(c, "readinessProbe.httpGet.path") == "/v2/health/ready", f"{name}: readiness probe")
    return get(d, "metadata.name")


def check_isvc(d, name, runtimes):
    need(d, name, ["metadata.name", "spec.predictor.model.modelFormat.name",
                   "spec.predictor.model.storageUri"])
    check(get(d, "spec.predictor.model.runtime") in runtimes, f"{name}: uses the kiln runtime")
    check(get(d, "spec.predictor.model.protocolVersion") == "v2", f"{name}: protocol v2")


def check_hpa(d, name, deployments):
    need(d, name, ["metadata.name", "spec.minReplicas", "spec.maxReplicas", "spec.metrics"])
    check(get(d, "spec.scaleTargetRef.kind") == "Deployment"
          and get(d, "spec.scaleTargetRef.name") in deployments, f"{name}: scales the Deployment")
    names = [get(m, "pods.metric.name") for m in get(d, "spec.metrics") or []]
    check("kiln_queue_depth" in names, f"{name}: scales on kiln_queue_depth")
    check(get(d, "spec.minReplicas") <= get(d, "spec.maxReplicas"), f"{name}: min <= max")


def check_k8s():
    files = sorted(glob.glob(os.path.join(DEPLOY, "k8s", "*.yaml")))
    check(len(files) >= 4, f"k8s: {len(files)} manifests")
    if shutil.which("yamllint"):
        r = subprocess.run(["yamllint", "-s", "-c", os.path.join(DEPLOY, ".yamllint")] + files,
                           capture_output=True, text=True)
        check(r.returncode == 0, "yamllint -s k8s/*.yaml" + (": " + r.stdout.strip() if r.stdout else ""))
    else:
        print("note yamllint is not installed (apt-get install yamllint): lint skipped")
    docs = []
    for f in files:
        try:
            with open(f) as fh:
                ds = [d for d in yaml.safe_load_all(fh) if d is not None]
            check(bool(ds), f"{os.path.basename(f)}: parses as YAML ({len(ds)} documents)")
        except yaml.YAMLError as e:
            check(False, f"{os.path.basename(f)}: parses as YAML: {e}")
            continue
        for d in ds:
            check(isinstance(d, dict) and "apiVersion" in d and "kind" in d,
                  f"{os.path.basename(f)}: document has apiVersion and kind")
            docs.append((os.path.basename(f), d))
    kinds = {}
    for f, d in docs:
        kinds.setdefault(d.get("kind"), []).append((f"{f} {d.get('kind')} {get(d, 'metadata.name')}", d))
    for k in ("Deployment", "Service", "ServingRuntime", "InferenceService", "HorizontalPodAutoscaler"):
        check(k in kinds, f"k8s: has a {k}")
    pod_labels, deps, runtimes = {}, set(), set()
    for name, d in kinds.get("Deployment", []):
        pod_labels.update(check_deployment(d, name))
        deps.add(get(d, "metadata.name"))
    for name, d in kinds.get("Service", []):
        check_service(d, name, pod_labels)
    for name, d in kinds.get("ServingRuntime", []):
        runtimes.add(check_runtime(d, name))
    for name, d in kinds.get("InferenceService", []):
        check_isvc(d, name, runtimes)
    for name, d in kinds.get("HorizontalPodAutoscaler", []):
        check_hpa(d, name, deps)


def check_unit(kiln):
    path = os.path.join(DEPLOY, "kiln-serve.service")
    text = open(path).read()
    keys = {}
    for line in text.splitlines():
        m = re.match(r"^(\w+)=(.*)$", line)
        if m:
            keys.setdefault(m.group(1), []).append(m.group(2))
    env = dict(e.split("=", 1) for e in keys.get("Environment", []))
    check(keys.get("ExecReload") == ["/bin/kill -HUP $MAINPID"], "unit: ExecReload sends SIGHUP")
    check(keys.get("KillSignal") == ["SIGTERM"], "unit: stops with SIGTERM")
    stop = float(keys.get("TimeoutStopSec", ["0"])[0])
    drain, exit_s = float(env.get("KILN_DRAIN_S", "nan")), float(env.get("KILN_EXIT_TIMEOUT_S", "nan"))
    check(stop >= drain + exit_s, f"unit: TimeoutStopSec {stop} >= drain {drain} + exit {exit_s}")
    check(keys.get("ExecStart", [""])[0].split()[1:2] == ["serve"], "unit: ExecStart runs kiln serve")
    sa = shutil.which("systemd-analyze")
    if not sa:
        print("note systemd-analyze is not installed: unit verification skipped")
        return
    binary = os.path.abspath(kiln) if kiln and os.access(kiln, os.X_OK) else "/bin/true"
    with tempfile.TemporaryDirectory() as d:
        unit = os.path.join(d, "kiln-serve.service")
        with open(unit, "w") as fh:
            fh.write(text.replace("/usr/local/bin/kiln", binary))
        r = subprocess.run([sa, "verify", unit], capture_output=True, text=True)
        msg = (r.stdout + r.stderr).strip()
        check(r.returncode == 0 and "kiln-serve.service" not in msg,
              "unit: systemd-analyze verify" + (": " + msg if msg else ""))


def main():
    check_k8s()
    check_unit(sys.argv[1] if len(sys.argv) > 1 else None)
    print(f"{'FAILED' if failures else 'passed'}: {len(failures)} failed check(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
