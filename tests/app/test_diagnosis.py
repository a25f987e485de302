"""Startup diagnosis: the seeds' causes, ranked, each with its evidence."""

from collector.diagnosis import diagnose, startup_seconds


def phase(name, duration, start=None, mem=None):
    return {"phase": name, "duration_s": duration, "start_ts": start, "mem_bytes": mem}


def capture(bs, duration, status="ok", error=None, variant=None):
    return {"graph_bs": bs, "stage": "decode", "duration_s": duration, "status": status,
            "error": error, "variant": variant, "pool_bytes": None, "pool_delta_bytes": None}


def causes(findings):
    return [f.cause for f in findings]


def test_a_quick_clean_startup_has_no_findings_beyond_weights():
    found = diagnose([phase("load_weights", 0.1), phase("capture", 0.4)],
                     [capture(bs, 0.1) for bs in (1, 2, 4, 8)])
    assert "too_many_sizes" not in causes(found)
    assert "outlier_sizes" not in causes(found)
    assert "failures" not in causes(found)


def test_many_sizes_are_reported_with_the_count_and_time():
    caps = [capture(bs, 1.0) for bs in range(1, 41)]
    found = diagnose([phase("load_weights", 2.0), phase("capture", 40.0)], caps)
    assert causes(found)[0] == "too_many_sizes"
    assert "40 sizes captured in 40.00 s" in found[0].evidence[0]
    assert any("--cuda-graph-bs" in a for a in found[0].sglang)
    assert any("--cudagraph-capture-sizes" in a for a in found[0].vllm)


def test_unused_sizes_are_named_when_the_step_histogram_is_known():
    caps = [capture(bs, 1.0) for bs in (1, 2, 4, 8, 16, 32)]
    found = diagnose([phase("capture", 6.0)], caps, used_sizes={1, 2, 4})
    assert causes(found) == ["too_many_sizes"]
    assert found[0].seconds == 3.0
    assert "8, 16, 32" in found[0].evidence[1]


def test_compile_is_reported_from_the_compile_phase():
    found = diagnose([phase("load_weights", 1.0), phase("compile", 30.0), phase("capture", 2.0)],
                     [capture(bs, 0.5) for bs in (1, 2, 4, 8)])
    assert causes(found)[0] == "torch_compile"
    assert found[0].seconds == 30.0
    assert any('"level": 0' in a for a in found[0].vllm)
    assert any("--enable-torch-compile" in a for a in found[0].sglang)


def test_slow_weight_load_ranks_by_its_seconds():
    found = diagnose([phase("load_weights", 60.0, mem=200 * 2**30), phase("capture", 3.0)],
                     [capture(bs, 1.0) for bs in (1, 2, 4)])
    assert causes(found)[0] == "large_model"
    assert found[0].title == "A very large model"
    assert "200.00 GiB of weights at 3413.3 MiB/s" in found[0].evidence[1]


def test_a_load_below_a_gigabyte_per_second_blames_storage():
    found = diagnose([phase("load_weights", 60.0, mem=16 * 2**30)], [capture(1, 1.0)])
    assert found[0].title == "Slow weight load"


def test_an_outlier_size_is_found_with_its_ratio():
    caps = [capture(bs, 0.2) for bs in (1, 2, 4, 8)] + [capture(16, 3.0)]
    found = diagnose([phase("capture", 3.8)], caps)
    outlier = next(f for f in found if f.cause == "outlier_sizes")
    assert outlier.evidence == ["bs 16: 3.00 s against a median of 0.20 s for the others (15.0x)"]


def test_failures_rank_first_and_oom_is_named():
    caps = [capture(bs, 1.0) for bs in (1, 2, 4)] + [
        capture(256, 0.5, status="failed", error="CUDA out of memory. Tried to allocate 2 GiB")]
    degrades = [{"from": "cuda", "to": "cuda-without-256", "error": "CUDA out of memory", "graph_bs": 256}]
    found = diagnose([phase("load_weights", 50.0), phase("capture", 3.5)], caps, degrades)
    assert causes(found)[0] == "oom"
    assert found[0].severity == "error"
    assert "bs 256" in found[0].evidence[0] and "out of memory" in found[0].evidence[0]
    assert "degraded cuda -> cuda-without-256 (bs 256)" in found[0].evidence[1]


def test_imported_runs_with_captures_only_are_diagnosed():
    caps = [capture(bs, 0.3) for bs in range(1, 30)]
    found = diagnose([], caps)
    assert causes(found) == ["too_many_sizes"]


def test_startup_seconds_uses_timestamps_when_every_phase_has_them():
    assert startup_seconds([phase("a", 1.0, start=10.0), phase("b", 2.0, start=10.5)], []) == 2.5
    assert startup_seconds([phase("a", 1.0), phase("b", 2.0)], []) == 3.0
    assert startup_seconds([], [capture(1, 0.5)]) == 0.5
