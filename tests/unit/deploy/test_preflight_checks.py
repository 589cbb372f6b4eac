"""The GPU preflight's pure checks (``abserve.deploy.gpu_preflight``) over parsed probe output.

Each refusal is driven by the probe text a real host prints (``nvidia-smi --query-gpu ... --format
=csv,noheader,nounits``, ``docker info --format '{{json .Runtimes}}'``) and the repository's own
GPU configs, so a change to a config's placement or to the compose defaults shows here.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from abserve.deploy.compose_env import ComposeExperiment
from abserve.deploy.gpu_preflight import (
    HostProbes,
    PreflightRefused,
    Probe,
    check_revision,
    is_release,
    load_config,
    parse_gpus,
    parse_runtimes,
    placements,
    preflight,
    read_env_file,
)

ROOT = Path(__file__).resolve().parents[3]
CONFIG_3B = ROOT / "configs" / "gpu-qwen2.5-vl-3b.yaml"
CONFIG_7B = ROOT / "configs" / "gpu-qwen2.5-vl-7b.yaml"
RELEASE = ROOT / "configs" / "gpu-release.yaml"
H100 = "0, NVIDIA H100 80GB HBM3, 81559, 9.0, 580.95.05\n"
A100_40 = "0, NVIDIA A100-PCIE-40GB, 40960, 8.0, 580.65.06\n"
RTX8000 = "0, Quadro RTX 8000, 49152, 7.5, 590.44.01\n"
RUNTIMES = '{"io.containerd.runc.v2":{"path":"runc"},"nvidia":{"path":"nvidia-container-runtime"},' \
           '"runc":{"path":"runc"}}\n'
SHARED = {"ABSERVE_GPU_A": "0", "ABSERVE_GPU_B": "0", "ABSERVE_GPU_A2": "0",
          "ABSERVE_GPU_MEMORY_UTILIZATION": "0.28"}
OWN = {"ABSERVE_GPU_A": "0", "ABSERVE_GPU_B": "1", "ABSERVE_GPU_A2": "2",
       "ABSERVE_GPU_MEMORY_UTILIZATION": "0.90"}


def host(gpus: str = H100, runtimes: str = RUNTIMES) -> HostProbes:
    return HostProbes(nvidia_smi=Probe(stdout=gpus), docker=Probe(stdout=runtimes))


def refusal(config: Path, probes: HostProbes, env: dict[str, str], allow: bool = False) -> str:
    with pytest.raises(PreflightRefused) as caught:
        preflight(load_config(config), probes, env, allow)
    message = str(caught.value)
    assert "\n" not in message
    return message


# ---- parsing -------------------------------------------------------------------------------


def test_gpu_lines_parse_with_commas_in_names_and_two_digit_capabilities() -> None:
    gpus = parse_gpus(H100 + "1, Odd, Name, 24576, 12.0, 580.95.05\n\n")
    assert [(g.index, g.name, g.memory_mib, g.compute_cap, g.driver) for g in gpus] == [
        (0, "NVIDIA H100 80GB HBM3", 81559, (9, 0), "580.95.05"),
        (1, "Odd, Name", 24576, (12, 0), "580.95.05")]
    assert gpus[1].compute_cap > (8, 0) > (7, 5)
    with pytest.raises(PreflightRefused, match="cannot read nvidia-smi"):
        parse_gpus("0, Tesla T4, [N/A], 7.5, 580.95.05\n")
    with pytest.raises(PreflightRefused, match="cannot read nvidia-smi's GPU line"):
        parse_gpus("0, NVIDIA H100 80GB HBM3, 81559, 9.0\n")  # the query without driver_version


# ---- the NVIDIA driver -------------------------------------------------------------------------


@pytest.mark.parametrize("driver", ["575.57.08", "570.195.03", "535.274.02", "580.65.05", "580"])
def test_a_driver_older_than_cuda_13_needs_is_refused_naming_its_version(driver: str) -> None:
    message = refusal(CONFIG_3B, host(H100.replace("580.95.05", driver)), SHARED)
    assert message.startswith(f"NVIDIA driver {driver} is older than 580.65.06, the minimum of CUDA 13")
    assert "update the driver" in message


@pytest.mark.parametrize("driver", ["580.65.06", "580.95.05", "590.44.01", "1000.1"])
def test_a_driver_of_cuda_13_is_accepted_and_named(driver: str) -> None:
    lines = preflight(load_config(CONFIG_3B), host(H100.replace("580.95.05", driver)), SHARED)
    assert lines[0] == f"NVIDIA driver {driver} (CUDA 13 needs 580.65.06 or newer)"
    assert lines[-1] == "gpu preflight: ok"


@pytest.mark.parametrize("driver", ["[N/A]", "", "580.65.06-beta", "r580"])
def test_an_unreadable_driver_version_is_a_clear_refusal(driver: str) -> None:
    message = refusal(CONFIG_3B, host(H100.replace("580.95.05", driver)), SHARED)
    assert message == (f"cannot read nvidia-smi's driver version {driver!r} "
                       "(expected a version such as 580.65.06)")


def test_the_oldest_driver_of_several_gpus_decides() -> None:
    gpus = H100 + H100.replace("0,", "1,", 1).replace("580.95.05", "575.64.05")
    assert "NVIDIA driver 575.64.05 is older" in refusal(CONFIG_3B, host(gpus), SHARED)


def test_runtimes_are_the_keys_of_docker_infos_json() -> None:
    assert parse_runtimes(RUNTIMES) == {"io.containerd.runc.v2", "nvidia", "runc"}
    assert parse_runtimes("null\n") == set()
    with pytest.raises(PreflightRefused, match="cannot read docker info"):
        parse_runtimes("<no value>")


def test_env_files_read_as_compose_does() -> None:
    text = "# GPU placement\nABSERVE_GPU_A=1\nexport ABSERVE_GPU_B='2'\nABSERVE_GPU_A2=\"0\"\nbad\n"
    assert read_env_file(text) == {"ABSERVE_GPU_A": "1", "ABSERVE_GPU_B": "2", "ABSERVE_GPU_A2": "0"}


def test_placement_falls_back_to_the_compose_defaults_for_empty_values() -> None:
    arms = placements(load_config(CONFIG_3B), {"ABSERVE_GPU_B": "", "ABSERVE_GPU_A2": "1"})
    assert [(p.arm, p.gpu, p.fraction, p.max_model_len) for p in arms] == [
        ("a", 0, 0.28, 32768), ("b", 0, 0.28, 32768), ("a2", 1, 0.28, 32768)]
    with pytest.raises(PreflightRefused, match="not a number"):
        placements(load_config(CONFIG_3B), {"ABSERVE_GPU_MEMORY_UTILIZATION": "lots"})
    with pytest.raises(PreflightRefused, match="at most 1"):
        placements(load_config(CONFIG_3B), {"ABSERVE_GPU_MEMORY_UTILIZATION": "1.5"})
    with pytest.raises(PreflightRefused, match="ABSERVE_GPU_B='GPU-1234'"):
        placements(load_config(CONFIG_3B), {"ABSERVE_GPU_B": "GPU-1234"})


# ---- the NVIDIA runtime ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("probes", "message"),
    [
        (HostProbes(nvidia_smi=Probe(found=False), docker=Probe(found=False)),
         "no NVIDIA runtime: nvidia-smi is not on PATH"),
        (HostProbes(nvidia_smi=Probe(returncode=9, stdout="NVIDIA-SMI has failed because it "
                                     "couldn't communicate with the NVIDIA driver.\n"), docker=Probe()),
         "nvidia-smi failed (exit 9): NVIDIA-SMI has failed because it couldn't communicate"),
        (host(gpus=""), "nvidia-smi lists no GPU"),
        (HostProbes(nvidia_smi=Probe(stdout=H100), docker=Probe(found=False)), "docker is not on PATH"),
        (HostProbes(nvidia_smi=Probe(stdout=H100),
                    docker=Probe(returncode=1, stderr="Cannot connect to the Docker daemon\n")),
         "docker info failed (exit 1): Cannot connect to the Docker daemon"),
        (host(runtimes='{"runc":{"path":"runc"}}'),
         "no NVIDIA runtime in Docker: docker info lists runc; install the NVIDIA Container Toolkit"),
    ],
)
def test_no_nvidia_runtime_is_refused(probes: HostProbes, message: str) -> None:
    assert message in refusal(CONFIG_3B, probes, SHARED)


# ---- placement: GPU count and memory -----------------------------------------------------------


def test_the_3b_configs_shared_placement_fits_one_80gb_gpu() -> None:
    lines = preflight(load_config(CONFIG_3B), host(), SHARED)
    assert lines[1].startswith("GPU 0 (NVIDIA H100 80GB HBM3, 80 GiB, compute capability 9.0): "
                               "three arms (a, b, a2) at 0.28 each, 84% of it, 22.3 GiB per arm")
    assert lines[-1] == "gpu preflight: ok"


def test_one_gpu_per_arm_gives_one_line_per_gpu() -> None:
    gpus = "".join(f"{i}, NVIDIA L40S, 46068, 8.9, 580.82.07\n" for i in range(3))
    lines = preflight(load_config(CONFIG_7B), host(gpus), OWN)
    assert [line.split(":")[0] for line in lines[1:4]] == [
        "GPU 0 (NVIDIA L40S, 45 GiB, compute capability 8.9)",
        "GPU 1 (NVIDIA L40S, 45 GiB, compute capability 8.9)",
        "GPU 2 (NVIDIA L40S, 45 GiB, compute capability 8.9)"]
    assert "one arm (b) at 0.9 each, 90% of it" in lines[2]


def test_an_arm_on_a_gpu_the_host_lacks_is_refused() -> None:
    message = refusal(CONFIG_7B, host(H100), OWN)
    assert message == "arm b is placed on GPU 1 (ABSERVE_GPU_B=1), this host has 1 GPU (0)"


def test_arms_whose_fractions_overcommit_a_gpu_are_refused() -> None:
    message = refusal(CONFIG_3B, host(), {**SHARED, "ABSERVE_GPU_MEMORY_UTILIZATION": "0.40"})
    assert message.startswith("three arms (a, b, a2) at 0.4 of GPU 0 need 120% of its 80 GiB, "
                              "at most 95% fits")


def test_a_gpu_too_small_for_the_models_share_is_refused() -> None:
    # The 7B config's shared placement (0.30 each, docs/gpu.md) is meant for an 80 GB GPU.
    message = refusal(CONFIG_7B, host(A100_40), {**SHARED, "ABSERVE_GPU_MEMORY_UTILIZATION": "0.30"})
    assert message.startswith("three arms (a, b, a2) at 0.3 of GPU 0 need 90% of a 68 GiB GPU "
                              "(20.2 GiB each for Qwen/Qwen2.5-VL-7B-Instruct), GPU 0 "
                              "(NVIDIA A100-PCIE-40GB) has 40 GiB")
    assert message.endswith("give each arm its own GPU (ABSERVE_GPU_<ARM>)")
    fits = preflight(load_config(CONFIG_7B), host(H100), {**SHARED, "ABSERVE_GPU_MEMORY_UTILIZATION": "0.30"})
    assert "23.9 GiB per arm (about 20.2 needed)" in fits[1]


def test_a_larger_fraction_is_suggested_when_it_would_fit() -> None:
    raw = load_config(CONFIG_3B).model_dump(mode="json", exclude_none=True)
    raw["arms"].pop("a2")  # router.arms is derived
    experiment = ComposeExperiment.model_validate(raw)
    two = {"ABSERVE_GPU_A": "0", "ABSERVE_GPU_B": "0", "ABSERVE_GPU_MEMORY_UTILIZATION": "0.20"}
    with pytest.raises(PreflightRefused, match=r"raise ABSERVE_GPU_MEMORY_UTILIZATION \(at most 0.47 "
                                               r"for two arms \(a, b\)\)"):
        preflight(experiment, host(A100_40), two)
    assert preflight(experiment, host(A100_40), {**two, "ABSERVE_GPU_MEMORY_UTILIZATION": "0.47"})


# ---- compute capability ------------------------------------------------------------------------


def test_batch_invariance_needs_compute_capability_8() -> None:
    message = refusal(CONFIG_3B, host(RTX8000), SHARED)
    assert message.startswith("VLLM_BATCH_INVARIANT=1 (server.env) needs compute capability 8.0 or "
                              "newer; GPU 0 (Quadro RTX 8000, 48 GiB), three arms (a, b, a2), has 7.5")
    assert preflight(load_config(CONFIG_3B), host(A100_40), SHARED)[-1] == "gpu preflight: ok"


def test_without_batch_invariance_an_older_gpu_is_accepted() -> None:
    experiment = load_config(CONFIG_3B)
    experiment.server.env["VLLM_BATCH_INVARIANT"] = "0"
    assert preflight(experiment, host(RTX8000), SHARED)[-1] == "gpu preflight: ok"


# ---- the model revision ------------------------------------------------------------------------


def test_the_release_config_is_a_release_and_pinned_the_lookup_configs_are_not_releases() -> None:
    assert is_release(load_config(RELEASE))
    assert not is_release(load_config(CONFIG_3B))
    assert not is_release(load_config(CONFIG_7B))
    line = check_revision(load_config(RELEASE), allow_unpinned=False)
    assert line == ("model Qwen/Qwen2.5-VL-3B-Instruct: revision "
                    "66285546d2b821cf421d4f5eb2576359d3770cd3 (pinned)")


UPPER = "66285546D2B821CF421D4F5EB2576359D3770CD3"


@pytest.mark.parametrize(("revision", "shown"), [
    ("main", "is 'main', not a commit"), (None, "is not set"), ("66285546", "is '66285546', not a commit"),
    (UPPER, f"is '{UPPER}', not a commit")])
def test_an_unpinned_release_is_refused_unless_allowed(revision: str | None, shown: str) -> None:
    experiment = load_config(RELEASE)
    experiment.model.revision = revision
    with pytest.raises(PreflightRefused, match=f"model.revision {shown}") as caught:
        preflight(experiment, host(), SHARED)
    assert "pass --allow-unpinned" in str(caught.value)
    lines = preflight(experiment, host(), SHARED, allow_unpinned=True)
    assert "not pinned (allowed by --allow-unpinned)" in lines[-2]
    assert lines[-1] == "gpu preflight: ok"


def test_a_lookup_sign_off_may_run_unpinned_and_says_so() -> None:
    lines = preflight(load_config(CONFIG_3B), host(), SHARED)
    assert lines[-2] == ("model Qwen/Qwen2.5-VL-3B-Instruct: revision main, not pinned "
                         "(not a release sign-off)")


def test_a_config_that_does_not_fit_compose_is_refused_in_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(f"extends: {RELEASE}\narms: {{b: {{image: 'vllm/vllm-openai:v0.33.0', env: {{X: '1'}}}}}}"
                   "\n")
    with pytest.raises(PreflightRefused, match="arm 'b': env: cannot apply under docker compose") as caught:
        load_config(bad)
    assert "\n" not in str(caught.value)
