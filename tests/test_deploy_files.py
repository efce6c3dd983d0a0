"""deploy/: Kubernetes manifests validated offline against the API schemas (kubernetes-validate, strict), the
links between them (selectors, probes, GPU, drain vs grace period, HPA metric), the Grafana dashboard's JSON and
that every metric it queries exists in metrics.py, and the systemd example = what install-service renders.
(The nginx config is tested by tests/test_nginx_replicas.py.)"""

from __future__ import annotations

import copy
import json
import re
import sys
import tomllib
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from live_server import REPO

from realtime_tts import config
from realtime_tts.cli import install_service
from realtime_tts.metrics import Metrics

DEPLOY = REPO / "deploy"
K8S_VERSION = "1.30.0"  # the oldest release the manifests target (preStop sleep: beta, on by default since 1.30)


def manifests() -> dict[str, dict[str, Any]]:
    out = {}
    for path in sorted((DEPLOY / "k8s").glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            out[f"{doc['kind']}/{doc['metadata']['name']}"] = doc
    return out


@pytest.mark.parametrize("version", [K8S_VERSION, kubernetes_validate.utils.latest_version()])
def test_every_manifest_is_valid(version: str) -> None:
    docs = manifests()
    assert {"Deployment/realtime-tts", "Service/realtime-tts", "HorizontalPodAutoscaler/realtime-tts",
            "ConfigMap/realtime-tts-config", "PersistentVolumeClaim/realtime-tts-voices"} <= set(docs)
    for doc in docs.values():
        kubernetes_validate.validate(doc, version, strict=True)  # raises ValidationError naming the field
    broken = copy.deepcopy(docs["Deployment/realtime-tts"])
    broken["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]["httpGet"]["prot"] = 1
    with pytest.raises(kubernetes_validate.ValidationError):  # the validator does reject a wrong key
        kubernetes_validate.validate(broken, version, strict=True)


def test_manifests_fit_together_and_with_the_server(tmp_path: Path) -> None:
    docs = manifests()
    dep, svc, hpa = docs["Deployment/realtime-tts"], docs["Service/realtime-tts"], docs["HorizontalPodAutoscaler/realtime-tts"]
    pod = dep["spec"]["template"]
    container = pod["spec"]["containers"][0]
    assert svc["spec"]["selector"].items() <= pod["metadata"]["labels"].items()
    assert dep["spec"]["selector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
    assert container["resources"]["limits"]["nvidia.com/gpu"] == 1
    assert container["readinessProbe"]["httpGet"]["path"] == "/health"
    # the config file the pod mounts is a valid config for this server, and the grace period covers the drain
    toml = docs["ConfigMap/realtime-tts-config"]["data"]["config.toml"]
    path = tmp_path / "config.toml"
    path.write_text(toml)
    cfg = config.load_config(env={}, config_file=path)
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    assert mounts["config"] + "/config.toml" == container["command"][-1]
    assert cfg.omnivoice.voices_dir == mounts["voices"] and cfg.server.host == "0.0.0.0"
    pre_stop = container["lifecycle"]["preStop"]["sleep"]["seconds"]
    assert pod["spec"]["terminationGracePeriodSeconds"] >= pre_stop + cfg.shutdown.drain_timeout_s + \
        cfg.shutdown.close_grace_s + 5
    assert tomllib.loads(toml)["server"]["port"] == container["ports"][0]["containerPort"]
    # the HPA scales on a metric the server exports
    (metric,) = hpa["spec"]["metrics"]
    assert metric["pods"]["metric"]["name"] in exported_series()
    assert hpa["spec"]["scaleTargetRef"]["name"] == dep["metadata"]["name"]


def exported_series() -> set[str]:
    """Every series name metrics.py can expose (counters with _total, histograms with _bucket/_sum/_count)."""
    names = set()
    for family in Metrics().registry.collect():
        if family.type == "counter":
            names |= {family.name + "_total", family.name + "_created"}
        elif family.type == "histogram":
            names |= {family.name + s for s in ("_bucket", "_sum", "_count", "_created")}
        else:
            names.add(family.name)
    return names


def test_grafana_dashboard_queries_only_existing_metrics() -> None:
    dash = json.loads((DEPLOY / "grafana" / "realtime-tts-dashboard.json").read_text())  # syntax
    exprs = [t["expr"] for p in dash["panels"] for t in p["targets"]]
    assert len(exprs) >= 10 and len({p["id"] for p in dash["panels"]}) == len(dash["panels"])
    known = exported_series()
    used = {name for e in exprs for name in re.findall(r"\brealtime_tts_[a-z_]+", e)}
    assert used and used <= known, sorted(used - known)
    for e in exprs:  # balanced brackets: a cheap PromQL syntax check
        assert e.count("(") == e.count(")") and e.count("[") == e.count("]") and e.count("{") == e.count("}"), e
    assert {"realtime_tts_queue_depth", "realtime_tts_ttfa_seconds_bucket"} <= used  # the HPA and latency signals


def test_systemd_example_is_what_install_service_renders() -> None:
    cfg = config.load_config(env={"REALTIME_TTS_CONFIG": ""})
    unit = install_service.render_unit(cfg, env_file=Path("/etc/realtime-tts/realtime-tts.env"), user=False,
                                       run_as="realtime-tts", config_file=None)
    shipped = (DEPLOY / "systemd" / "realtime-tts.service").read_text()
    body = "\n".join(line for line in shipped.splitlines() if not line.startswith("#")) + "\n"
    assert body == unit.replace(sys.executable, "/opt/realtime-tts/.venv/bin/python")
    assert (DEPLOY / "systemd" / "realtime-tts.env").read_text() == install_service.render_env({})
