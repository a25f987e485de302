"""``replayscope run``: bad input gets one error line, exit 2 and no events file; --help explains
every flag; a good run writes an events file that passes the wire contract."""

import io
import re
import sys

import pytest
import torch

from replayscope.app.cli import build_parser, main
from replayscope.contract.events_file import read_events_file
from replayscope.runner import runner_core

torch.set_num_threads(1)


def run_cli(capsys, *argv):
    try:
        code = main(["run", *argv])
    except SystemExit as exit_:          # argparse's own errors
        code = exit_.code
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.mark.parametrize("argv, message", [
    (["--steps", "0"], "--steps must be at least 1, got 0"),
    (["--max-bs", "0"], "--max-bs goes from 1 to 4096, got 0"),
    (["--max-bs", "99999999"], "--max-bs goes from 1 to 4096, got 99999999"),
    (["--capture-sizes", "1,99999999"], "batch sizes go from 1 to 4096, got 99999999"),   # 11.26 GB RSS, exit 0
    (["--duration", "nan"], "--duration must be positive and at most 2.592e+06 s, got nan"),   # never stopped
    (["--duration", "inf"], "--duration must be positive and at most 2.592e+06 s, got inf"),
    (["--duration", "0"], "--duration must be positive"),
    (["--name", "n" * 300], "--name 'nnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnn... (300 characters)': longer than 200 characters"),
    (["--version-tag", "v" * 65], "--version-tag 'vvvv"),
    (["--version-tag", "v" * 65], "longer than 64 characters"),
    (["--run-id", "a/b"], "--run-id 'a/b': 'a/b' does not match"),
    (["--run-id", "r" * 129], "--run-id"),
    (["--capture-sizes", "1,two"], "--capture-sizes: 'two' is not an integer"),
    (["--capture-sizes", "0,4"], "batch sizes go from 1 to 4096, got 0"),
    (["--parity-every", "-2"], "--parity-every must be >= 0"),
    (["--time-every", "0"], "--time-every must be at least 1, got 0"),
    (["--preset", "huge"], "unknown model preset 'huge'"),
    (["--collector", "ftp://example"], "--collector 'ftp://example' is not an http(s) URL"),
    (["--arrival-rate", "0"], "arrival rate must be positive, got 0.0"),
    (["--max-running", "0"], "max running requests must be at least 1, got 0"),
    (["--prompt-len", "8"], "--prompt-len takes MIN,MAX (two integers), got '8'"),
    (["--output-len", "9,3"], "output length range must be 1 <= MIN <= MAX, got 9,3"),
])
def test_a_bad_flag_value_gives_one_error_line_exit_2_and_no_events_file(capsys, tmp_path, argv, message):
    events = tmp_path / "run.jsonl"
    code, out, err = run_cli(capsys, "--backend", "static", "--quiet", "--events", str(events), *argv)
    assert code == 2
    assert err.count("\n") == 1 and err.startswith("replayscope run: error: ") and message in err
    assert not events.exists()


@pytest.mark.parametrize("argv, message", [
    (["--backend", "tpu"], "argument --backend: invalid choice: 'tpu'"),
    (["--workload", "bursty"], "argument --workload: invalid choice: 'bursty'"),
    (["--steps", "ten"], "argument --steps: invalid int value: 'ten'"),
    (["--steps", "5", "--duration", "2"], "argument --duration: not allowed with argument --steps"),
    (["--preset", "tiny", "--model-dir", "."], "argument --model-dir: not allowed with argument --preset"),
    (["--frobnicate"], "unrecognized arguments: --frobnicate"),
])
def test_a_malformed_command_line_ends_with_one_error_line_and_exit_2(capsys, tmp_path, argv, message):
    events = tmp_path / "run.jsonl"
    code, _, err = run_cli(capsys, "--quiet", "--events", str(events), *argv)
    assert code == 2
    last = err.strip().splitlines()[-1]
    assert last.startswith("replayscope") and ": error: " in last and message in last
    assert err.strip().splitlines() == [last]                  # one line, no usage block
    assert not events.exists()


def test_events_in_a_missing_directory_or_a_directory_is_refused(capsys, tmp_path):
    code, _, err = run_cli(capsys, "--events", str(tmp_path / "nope" / "run.jsonl"))
    assert code == 2 and "its directory does not exist" in err and err.count("\n") == 1
    code, _, err = run_cli(capsys, "--events", str(tmp_path))
    assert code == 2 and "is a directory" in err and err.count("\n") == 1


def _no_config(tmp_path):
    (tmp_path / "ckpt").mkdir()
    (tmp_path / "ckpt" / "model.safetensors").write_bytes(b"")
    return tmp_path / "ckpt", "no config.json in"


def _a_file(tmp_path):
    (tmp_path / "ckpt").write_text("not a directory")
    return tmp_path / "ckpt", "no such directory"


def _missing(tmp_path):
    return tmp_path / "missing", "no such directory"


def _bad_config(tmp_path):
    (tmp_path / "ckpt").mkdir()
    (tmp_path / "ckpt" / "config.json").write_text("{not json")
    return tmp_path / "ckpt", "config.json"


@pytest.mark.parametrize("make", [_missing, _no_config, _a_file, _bad_config])
def test_a_bad_checkpoint_directory_gives_one_error_line_exit_2_and_no_events_file(capsys, tmp_path, make):
    model_dir, message = make(tmp_path)
    events = tmp_path / "run.jsonl"
    code, _, err = run_cli(capsys, "--backend", "static", "--quiet", "--model-dir", str(model_dir),
                           "--events", str(events), "--steps", "3")
    assert code == 2
    assert err.count("\n") == 1 and err.startswith("replayscope run: error: ") and message in err
    assert not events.exists()


def test_help_explains_every_flag(capsys):
    code, out, _ = run_cli(capsys, "--help")
    assert code == 0
    run_parser = build_parser()._subparsers._group_actions[0].choices["run"]
    flags = [a for a in run_parser._actions if a.option_strings and "--help" not in a.option_strings]
    assert len(flags) >= 20
    for action in flags:
        assert action.option_strings[-1] in out, action.option_strings
        assert action.help and len(action.help) > 15, f"{action.option_strings} has no real help"
    for word in ("graph", "padded", "eager", "JSON lines", "collector", "--max-bs"):
        assert word in out


def test_a_good_run_writes_an_events_file_that_passes_the_contract(capsys, tmp_path):
    events = tmp_path / "run.jsonl"
    code, _, err = run_cli(capsys, "--backend", "static", "--preset", "tiny", "--workload", "mixed",
                           "--steps", "60", "--max-bs", "8", "--seed", "4", "--run-id", "cli-run-1",
                           "--name", "cli test", "--events", str(events), "--quiet")
    assert code == 0
    run, lines, _ = read_events_file(events)            # every line checked against the wire contract
    assert run["run_id"] == "cli-run-1" and run["name"] == "cli test"
    assert run["backend"] == "static" and run["device"] == "cpu" and run["source"] == "runner"
    assert run["config"]["capture_sizes"] == [1, 2, 4, 8] and run["config"]["seed"] == 4
    assert [e["seq"] for e in lines] == list(range(len(lines)))
    assert run["config"]["step_timing"] == {"clock": "host", "every": 1}     # CPU: every step, on the host
    assert run["config"]["step_core"] == runner_core.CORE                    # the core its runners ran
    assert sum(e["kind"] == "step" for e in lines) == 60
    assert lines[-1]["kind"] == "run_end" and lines[-1]["status"] == "finished"
    assert "run cli-run-1 (cli test, backend static on cpu): 60 steps" in err


def test_workload_flags_override_the_named_workload(capsys, tmp_path):
    events = tmp_path / "run.jsonl"
    code, _, err = run_cli(capsys, "--backend", "static", "--quiet", "--steps", "40", "--events", str(events),
                           "--arrival-rate", "25", "--max-running", "20", "--prompt-len", "4,6",
                           "--output-len", "3,5")
    assert code == 0, err
    run, lines, _ = read_events_file(events)
    workload = run["config"]["workload"]
    assert (workload["arrival_rate"], workload["max_running"]) == (25.0, 20)
    assert (workload["prompt_len"], workload["output_len"]) == ([4, 6], [3, 5])
    prefills = [e for e in lines if e["kind"] == "step" and e["stage"] == "prefill"]
    assert prefills and all(4 * e["raw_bs"] <= e["num_tokens"] <= 6 * e["raw_bs"] for e in prefills)
    assert max(e["raw_bs"] for e in lines if e["kind"] == "step") <= 20


def config_of(*argv):
    from replayscope.app.cli.run import config_from_args

    return config_from_args(build_parser().parse_args(["run", *argv]))


@pytest.mark.parametrize("flag", ["--enforce-eager", "--disable-cuda-graph"])
def test_the_engines_eager_flags_mean_backend_disabled(flag):
    assert config_of(flag).backend == "disabled"
    assert config_of().backend == "auto"


def test_enforce_eager_with_backend_auto_runs_eager(capsys, tmp_path):
    events = tmp_path / "run.jsonl"
    code, _, err = run_cli(capsys, "--enforce-eager", "--backend", "auto", "--preset", "tiny", "--steps", "10",
                           "--events", str(events), "--quiet")
    assert code == 0 and "backend disabled" in err


def test_enforce_eager_with_a_graph_backend_is_refused(capsys):
    code, _, err = run_cli(capsys, "--enforce-eager", "--backend", "cuda", "--quiet")
    assert code == 2 and err.count("\n") == 1 and "--enforce-eager" in err and "--backend cuda" in err


@pytest.mark.parametrize("argv", [
    ["--capture-sizes", "1,2,4,8"], ["--capture-sizes", "1", "2", "4", "8"],
    ["--cudagraph-capture-sizes", "1", "2", "4", "8"], ["--cudagraph-capture-sizes", "1,2,4,8"],
    ["--cuda-graph-bs", "8", "4", "2", "1"], ["--cuda-graph-bs", "1, 2, 4, 8"],
])
def test_capture_sizes_take_vllm_and_sglang_spellings_comma_or_space_separated(argv):
    config = config_of(*argv)
    assert config.capture_sizes == (1, 2, 4, 8) and config.max_bs == 8


@pytest.mark.parametrize("flag", ["--max-bs", "--max-cudagraph-capture-size", "--cuda-graph-max-bs"])
def test_the_largest_captured_size_takes_vllm_and_sglang_spellings(flag):
    config = config_of(flag, "16")
    assert config.max_bs == 16 and config.sizes == (1, 2, 4, 8, 16)


def test_a_largest_size_that_contradicts_the_capture_sizes_is_refused(capsys):
    code, _, err = run_cli(capsys, "--cuda-graph-bs", "1", "2", "4", "--cuda-graph-max-bs", "8", "--quiet")
    assert code == 2 and err.count("\n") == 1 and "differs from the largest of --capture-sizes" in err


@pytest.mark.parametrize("flag", ["--max-running", "--max-num-seqs", "--max-running-requests"])
def test_the_running_request_cap_takes_vllm_and_sglang_spellings(flag):
    assert config_of(flag, "20").workload_overrides["max_running"] == 20


@pytest.mark.parametrize("flag, field, value", [("--disable-cuda-graph-padding", "padding", False),
                                                ("--enable-torch-compile", "compile", True)])
def test_sglang_padding_and_compile_flags_mean_ours(flag, field, value):
    assert getattr(config_of(flag), field) == value


def _mode_shares(events_path, steps):
    modes = [e["mode"] for e in read_events_file(events_path).events if e["kind"] == "step"]
    assert len(modes) == steps
    return " ".join(f"{m} {100 * modes.count(m) / steps:.0f}%" for m in ("graph", "padded", "eager"))


def test_a_run_shows_progress_for_weights_capture_and_steps_as_plain_lines_off_a_terminal(capsys, tmp_path):
    events = tmp_path / "run.jsonl"
    code, _, err = run_cli(capsys, "--backend", "static", "--workload", "mixed", "--steps", "40", "--max-bs", "8",
                           "--events", str(events))
    assert code == 0
    assert "\r" not in err
    lines = err.splitlines()
    weights = [i for i, line in enumerate(lines) if line.startswith("Building random weights (tiny): 100%")]
    decode = [i for i, line in enumerate(lines) if line.startswith("Capturing static stand-ins (decode): 100%")]
    verify = [i for i, line in enumerate(lines) if line.startswith("Capturing static stand-ins (verify): 100%")]
    steps = [i for i, line in enumerate(lines) if line.startswith("Running mixed workload: ")]
    assert len(weights) == len(decode) == len(verify) == 1 and len(steps) >= 2
    assert weights[0] < decode[0] < verify[0] < steps[0]
    assert re.search(r"\| (\d+)/\1 \[", lines[weights[0]]) and ", output.weight]" in lines[weights[0]]
    assert "| 4/4 [" in lines[decode[0]] and "bs=1 " in lines[decode[0]]
    assert lines[steps[0]].startswith("Running mixed workload:   0%|          | 0/40 [")
    final = lines[steps[-1]]
    assert re.match(r"Running mixed workload: 100%\|##########\| 40/40 \[\d\d:\d\d<00:00, +[\d.]+steps/s, ", final)
    assert final.endswith(f", {_mode_shares(events, 40)}]")
    assert lines[-1].startswith("run ") and "40 steps" in lines[-1]


def test_on_a_terminal_each_progress_line_is_redrawn_in_place(capsys, tmp_path, monkeypatch):
    class Terminal(io.StringIO):
        def isatty(self):
            return True

    terminal = Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    code, _, _ = run_cli(capsys, "--backend", "static", "--steps", "30", "--max-bs", "8")
    assert code == 0
    lines = terminal.getvalue().split("\n")
    bars = [line for line in lines if line.startswith("\r")]
    assert [b.split("\r")[-1].split(":")[0] for b in bars] == [
        "Building random weights (tiny)", "Capturing static stand-ins (decode)", "Capturing static stand-ins (verify)",
        "Running mixed workload"]
    assert bars[-1].split("\r")[-1].startswith("Running mixed workload: 100%|##########| 30/30 [")


def test_a_compiled_run_raises_dynamos_recompile_limit_for_its_sizes_and_says_so(capsys, monkeypatch, caplog):
    """``replayscope run`` owns its process, so its compile backend raises the limit (a library
    caller opts in); torch.compile itself is stood in for, this is about the setting."""
    monkeypatch.setattr(torch, "compile", lambda fn, **_options: fn)
    monkeypatch.setattr(torch._dynamo.config, "recompile_limit", 2)
    with caplog.at_level("WARNING", logger="replayscope.runner.capture"):
        code, _, _ = run_cli(capsys, "--compile", "--steps", "5", "--max-bs", "4", "--quiet")
    assert code == 0
    assert torch._dynamo.config.recompile_limit == 11                 # sizes 1, 2, 4 and 8 more
    assert "replayscope raised torch._dynamo.config recompile_limit 2 -> 11 to compile 3 batch sizes" in \
        [r.getMessage() for r in caplog.records]


def test_quiet_silences_every_progress_line(capsys, tmp_path):
    code, _, err = run_cli(capsys, "--backend", "static", "--steps", "30", "--max-bs", "8", "--quiet")
    assert code == 0
    assert err.count("\n") == 1 and err.startswith("run ")
