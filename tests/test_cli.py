"""The real entry point, as a user runs it, with tiny budgets."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

TINY = ["--max-time", "none", "--prompts-per-step", "2", "--n", "4", "--m", "2",
        "--eval-size", "8", "--max-new-tokens", "4", "--progress", "false",
        "--recipe", "embedded"]  # the small test models train as the embedded one


def pods(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}  # tests never reach the network
    return subprocess.run([sys.executable, "-m", "pods", *args], capture_output=True,
                          text=True, timeout=300, env=env)


@pytest.fixture(scope="module")
def trained_run(tiny_model_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("cli")
    result = pods("train", "--model", tiny_model_dir, "--max-steps", "2", *TINY,
                  "--out-dir", str(out), "--run-name", "r")
    assert result.returncode == 0, result.stderr
    return out / "r"


def test_train_writes_a_run(trained_run):
    assert (trained_run / "metrics.jsonl").is_file()
    assert (trained_run / "checkpoints" / "latest").is_file()
    assert (trained_run / "curve.png").is_file()


def test_eval_a_run_and_a_checkpoint(trained_run):
    for path in (trained_run, trained_run / "checkpoints" / "step_000002"):
        result = pods("eval", str(path), "--eval-size", "5", "--repeats", "2", "--json")
        assert result.returncode == 0, result.stderr
        metrics = json.loads(result.stdout[result.stdout.index("{"):])["arithmetic"]
        assert metrics["eval/problems"] == 5 and 0 <= metrics["eval/accuracy"] <= 1
        assert metrics["eval/repeats"] == 2 and "eval/accuracy_sem" in metrics


def test_eval_ends_with_its_table(trained_run):
    result = pods("eval", str(trained_run), "--eval-size", "5", "--repeats", "2")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.strip().splitlines()
    assert lines[-4] == f"model: {trained_run / 'checkpoints' / 'step_000002' / 'model'}"
    assert lines[-3].startswith("| test set | problems | temperature | repeats | new tokens "
                                "| accuracy |")
    assert re.fullmatch(r"\| arithmetic \| 5 \| 0 \| 2 \| 4 \| \d+\.\d% ± \d+\.\d \| - \| "
                        r"-?\d\.\d{3} \| \d+\.\d \| 0 \|", lines[-1]), lines[-1]


def test_eval_of_a_run_scores_as_its_training_evaluations_did(trained_run):
    """The run evaluated greedily once (its eval_temperature 0, eval_repeats 1) on its first
    8 test problems (eval_size 8): so does `pods eval` of it, saying so, unless flags say
    otherwise; the last training evaluation and `pods eval` of the same checkpoint on the
    same problems agree."""
    result = pods("eval", str(trained_run), "--json")
    assert result.returncode == 0, result.stderr
    metrics = json.loads(result.stdout[result.stdout.index("{"):])["arithmetic"]
    assert (metrics["eval/temperature"], metrics["eval/repeats"]) == (0.0, 1)
    last = [json.loads(line) for line in (trained_run / "metrics.jsonl").read_text()
            .splitlines() if '"eval"' in line][-1]
    assert metrics["eval/problems"] == last["eval/problems"] == 8  # not the whole split
    assert "arithmetic: the problems training evaluated: the first 8 of the test split " \
           "from offset 0" in result.stderr
    assert metrics["eval/accuracy"] == last["eval/accuracy"]
    result = pods("eval", str(trained_run), "--eval-temperature", "0.9", "--repeats", "2",
                  "--json")
    metrics = json.loads(result.stdout[result.stdout.index("{"):])["arithmetic"]
    assert (metrics["eval/temperature"], metrics["eval/repeats"]) == (0.9, 2)


def test_eval_in_float16_is_allowed_where_training_in_it_is_not(trained_run):
    result = pods("eval", str(trained_run), "--dtype", "float16", "--eval-size", "4", "--json")
    assert result.returncode == 0, result.stderr
    result = pods("train", "--config", str(trained_run / "config.yaml"), "--dtype",
                  "float16", "--run-name", "f16", "--max-steps", "1")
    assert result.returncode != 0 and "float16 for a full fine-tune" in result.stderr


def test_eval_a_plain_model(tiny_model_dir):
    result = pods("eval", tiny_model_dir, "--task", "arithmetic", "--eval-size", "4",
                  "--repeats", "1", "--eval-temperature", "0", "--max-new-tokens", "8",
                  "--json")
    assert result.returncode == 0, result.stderr
    metrics = json.loads(result.stdout[result.stdout.index("{"):])
    assert metrics["arithmetic"]["eval/problems"] == 4


def test_resume_with_a_larger_budget(trained_run):
    result = pods("train", "--resume", str(trained_run), "--max-steps", "3")
    assert result.returncode == 0, result.stderr
    last = json.loads((trained_run / "metrics.jsonl").read_text().splitlines()[-1])
    assert (last["kind"], last["step"]) == ("done", 3)


def test_plot_a_run(trained_run):
    (trained_run / "curve.png").unlink()
    result = pods("plot", str(trained_run))
    assert result.returncode == 0, result.stderr
    assert (trained_run / "curve.png").is_file()


def test_compare_and_plot(tiny_model_dir, tmp_path):
    spec = tmp_path / "spec.yaml"
    spec.write_text("base: {max_steps: 2, eval_every: 1000}\nseeds: 1\nbaseline: grpo\n"
                    "variants:\n  grpo: {n: 2, m: 2}\n  pods: {n: 4, m: 2}\n")
    out = tmp_path / "cmp"
    result = pods("compare", str(spec), "--out", str(out), "--model", tiny_model_dir,
                  *TINY[:2], *TINY[6:])
    assert result.returncode == 0, result.stderr
    for name in ("summary.md", "summary.json", "curves.png", "compare.yaml"):
        assert (out / name).is_file(), name
    assert {row["variant"] for row in json.loads((out / "summary.json").read_text())} == \
        {"grpo", "pods"}
    (out / "curves.png").unlink()
    assert pods("plot", str(out)).returncode == 0 and (out / "curves.png").is_file()


@pytest.mark.parametrize("args, message", [
    (["train", "--m", "100"], "m=100 is larger than n="),
    (["train", "--rule", "best"], "unknown rule 'best'"),
    (["train", "--max-time", "-1"], "max_time=-1.0 must be positive"),
    (["train", "--config", "missing.yaml"], "missing.yaml does not exist"),
    (["eval", "nowhere"], "name the test sets with --task"),
    (["eval", "tiny", "--task", "gsm8k"], "'tiny' only knows the arithmetic task"),
    (["plot", "nowhere"], "neither a run folder"),
    (["train", "--model", "no-such-org/no-such-model", "--max-steps", "1"],
     "--model no-such-org/no-such-model is a Hugging Face hub id, not in the local cache"),
    (["train", "--config", "/tmp"], "/tmp is a folder, not a YAML file"),
    (["train", "--lr", "-1e-5"], "lr=-1e-05 must be positive"),  # not "expected one
    # argument": the value reached the config's check
])
def test_bad_input_fails_fast_with_a_message(args, message):
    result = pods(*args)
    assert result.returncode == 2
    assert message in result.stderr and "Traceback" not in result.stderr
    assert not list(Path(os.environ["PODS_CACHE"]).glob("tiny-*"))  # no model was built


def test_an_unknown_flag_is_said_first_in_one_line():
    result = pods("train", "--num-generations", "8")
    assert result.returncode == 2
    first, second = result.stderr.strip().splitlines()  # no usage block before it
    assert first.startswith("pods train: error: unrecognized arguments: --num-generations "
                            "8; --num-generations: pods calls it --n (rollouts generated")
    assert second == "(`pods train --help` lists every flag)"


def test_hard_kill_then_resume(tiny_model_dir, tmp_path):
    import signal
    import time

    out = tmp_path / "killed"
    cmd = [sys.executable, "-m", "pods", "train", "--model", tiny_model_dir, "--max-steps",
           "100000", *TINY, "--checkpoint-every", "0.05", "--out-dir", str(tmp_path),
           "--run-name", "killed"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 120
    while not (out / "checkpoints" / "latest").exists() and time.time() < deadline:
        time.sleep(0.2)
    time.sleep(1.0)  # let it write more steps and checkpoints
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    saved = int((out / "checkpoints" / "latest").read_text().split("_")[1])
    assert saved >= 1
    result = pods("train", "--resume", str(out), "--max-steps", str(saved + 2))
    assert result.returncode == 0, result.stderr
    steps = [json.loads(line)["step"] for line in (out / "metrics.jsonl").read_text()
             .splitlines() if '"kind": "step"' in line]
    assert steps == list(range(1, saved + 3))  # redone from the checkpoint, no duplicates


def test_a_raising_user_reward_stops_with_one_line_and_a_checkpoint(tiny_model_dir, tmp_path):
    """`pods train` on a custom task whose reward function (user code) raises on its 20th
    call, after the first step: one error line naming the function, the exception and the
    problem, no traceback, a checkpoint of the last complete step and the resume command."""
    data = tmp_path / "problems.jsonl"
    data.write_text("".join(f'{{"prompt": "{i}", "answer": "{i % 2}"}}\n' for i in range(20)))
    (tmp_path / "flaky_reward.py").write_text(
        "calls = []\n"
        "def score(completion, answer):\n"
        "    calls.append(1)\n"
        "    if len(calls) == 20:\n"
        "        raise KeyError('score')\n"
        "    return float(answer in completion)\n")
    env = {**os.environ, "HF_HUB_OFFLINE": "1",
           "PYTHONPATH": f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    done = subprocess.run(
        [sys.executable, "-m", "pods", "train", "--model", tiny_model_dir, "--task", "custom",
         "--data-file", str(data), "--reward-fn", "flaky_reward:score", "--eval-size", "2",
         "--max-steps", "3", "--out-dir", str(tmp_path), "--run-name", "r", *TINY[:8],
         "--max-new-tokens", "4", "--progress", "false", "--recipe", "embedded"],
        capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    error = [line for line in done.stderr.splitlines() if line.startswith("pods train: error")]
    assert len(error) == 1
    assert "reward function flaky_reward:score raised KeyError: 'score'; problem '" in error[0]
    stopped = re.search(r"stopped \(RewardError\) after step (\d+)", done.stdout)
    assert stopped and int(stopped[1]) >= 1, done.stdout
    latest = (tmp_path / "r" / "checkpoints" / "latest").read_text()
    assert latest == f"step_{int(stopped[1]):06d}"
    assert f"pods train --resume {tmp_path / 'r'}" in done.stdout


LOW_START = "def score(completion, answer):\n    return float(completion[:1] in '01234')\n"


def test_ctrl_c_then_resume_equals_an_uninterrupted_run(tiny_model_dir, tmp_path):
    """A real SIGINT to `python -m pods train` at whatever moment it arrives (generation,
    update, checkpoint write...): exit code 130, a resumable folder, and `--resume` then
    gives the uninterrupted run's step records and final weights."""
    import signal
    import time

    import torch

    from pods.cli import main
    from runs import weights

    data = tmp_path / "problems.jsonl"
    data.write_text("".join(f'{{"prompt": "{i}+{i}=", "answer": "{2 * i}"}}\n'
                            for i in range(30)))
    (tmp_path / "low_start.py").write_text(LOW_START)
    steps = 12
    args = ["train", "--model", tiny_model_dir, "--task", "custom", "--data-file", str(data),
            "--reward-fn", "low_start:score", "--max-steps", str(steps), *TINY,
            "--lr-schedule", "constant", "--lr", "0.01", "--checkpoint-every", "1e9",
            "--eval-every", "1e9", "--out-dir", str(tmp_path)]
    env = {**os.environ, "HF_HUB_OFFLINE": "1",
           "PYTHONPATH": f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    # SIGINT as in a terminal, also where the suite runs with it ignored (`make test &`)
    proc = subprocess.Popen([sys.executable, "-m", "pods", *args, "--run-name", "part"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    metrics = tmp_path / "part" / "metrics.jsonl"
    deadline = time.time() + 120
    while time.time() < deadline and proc.poll() is None and \
            (not metrics.exists() or metrics.read_text().count('"kind": "step"') < 2):
        time.sleep(0.02)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert "interrupted (continue the run with `pods train --resume RUN_DIR`)" in err
    assert "Traceback" not in err and "stopped (interrupted)" in out
    result = subprocess.run([sys.executable, "-m", "pods", "train", "--resume",
                             str(tmp_path / "part")], capture_output=True, text=True,
                            timeout=300, env=env)
    assert result.returncode == 0, result.stderr
    sys.path.insert(0, str(tmp_path))  # the uninterrupted run, here, with the same flags
    try:
        assert main([*args, "--run-name", "whole"]) == 0
    finally:
        sys.path.remove(str(tmp_path))
    runs = [tmp_path / "whole", tmp_path / "part"]
    rewards = [[json.loads(line).get("rollout/reward_mean") for line in
                (run / "metrics.jsonl").read_text().splitlines()
                if '"kind": "machine"' not in line] for run in runs]  # part: one per start
    assert rewards[0] == rewards[1]
    kinds = [[json.loads(line)["kind"] for line in (run / "metrics.jsonl").read_text()
              .splitlines()] for run in runs]
    assert (kinds[0].count("machine"), kinds[1].count("machine")) == (1, 2)  # + the resume
    a, b = (weights(run / "checkpoints" / f"step_{steps:06d}" / "model") for run in runs)
    for k in a:
        torch.testing.assert_close(a[k], b[k], rtol=0, atol=1e-6)


def test_a_bad_data_file_is_one_error_line(tiny_model_dir, tmp_path):
    data = tmp_path / "problems.jsonl"
    data.write_text('{"prompt": "1", "answer": "1"}\n{"prompt": "2", "answer": null}\n')
    result = pods("train", "--model", tiny_model_dir, "--task", "custom", "--data-file",
                  str(data), "--max-steps", "1", "--out-dir", str(tmp_path))
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines() == [
        f"pods train: error: --data-file {data}, line 2: 'answer' is null; every record "
        f"needs a 'prompt' and an 'answer' that are not null."]
    assert list(tmp_path.iterdir()) == [data]  # no run folder


def test_eval_and_export_fall_back_from_an_unreadable_checkpoint(tiny_model_dir, tmp_path):
    """As resume does: the newest checkpoint's weights are truncated, so `pods eval` and
    `pods export` take the one before, saying which could not be read and why; a checkpoint
    folder named on its own that cannot be read is one error line."""
    run = tmp_path / "r"
    base = ["--model", tiny_model_dir, *TINY, "--out-dir", str(tmp_path), "--run-name", "r"]
    assert pods("train", *base, "--max-steps", "1").returncode == 0
    assert pods("train", "--resume", str(run), "--max-steps", "2").returncode == 0
    broken = next((run / "checkpoints" / "step_000002" / "model").glob("*.safetensors"))
    broken.write_bytes(broken.read_bytes()[:100])
    result = pods("eval", str(run), "--eval-size", "3", "--repeats", "1")
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr
    assert f"checkpoint {run / 'checkpoints' / 'step_000002'} cannot be read (" \
        in result.stderr and "falling back to step_000001" in result.stderr
    assert f"model: {run / 'checkpoints' / 'step_000001' / 'model'}" in result.stdout
    result = pods("export", str(run), str(tmp_path / "out"))
    assert result.returncode == 0 and "falling back to step_000001" in result.stderr
    assert (tmp_path / "out" / "config.json").is_file()
    result = pods("eval", str(run / "checkpoints" / "step_000002"))
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert f"pods eval: error: checkpoint {run / 'checkpoints' / 'step_000002'} cannot be " \
           f"read (" in result.stderr


def test_the_extra_the_cli_names_is_the_train_extra_of_pyproject():
    """TRAIN_EXTRA (the modules whose absence `pods` answers with the install line) is the
    train extra of pyproject.toml, by import name: the two lists cannot drift apart."""
    import tomllib

    from pods.cli import TRAIN_EXTRA

    pyproject = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml")
                              .read_text())
    train = pyproject["project"]["optional-dependencies"]["train"]
    names = [re.split(r"[<>=!~ \[]", spec)[0].replace("-", "_") for spec in train]
    assert sorted(TRAIN_EXTRA) == sorted(names)


def test_without_the_train_extra_help_works_and_train_names_the_extra(tmp_path):
    """A core install (torch, numpy, PyYAML): `pods --help` works; `pods train` stops with
    one line naming the extra to install (here transformers is made unimportable)."""
    code = ("import sys; sys.modules['transformers'] = None; from pods.cli import main; "
            "sys.exit(main(sys.argv[1:]))")
    run = [sys.executable, "-c", code]
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1] / "src")}
    helped = subprocess.run([*run, "--help"], capture_output=True, text=True, env=env)
    assert helped.returncode == 0 and "train" in helped.stdout
    done = subprocess.run([*run, "train", "--max-steps", "1", "--out-dir", str(tmp_path)],
                          capture_output=True, text=True, env=env, cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == [
        "pods train: error: transformers is not installed; `pip install -e '.[train]'` in "
        "pods's clone brings it (the core install has the config, the CLI and the math of "
        "pods.core)."]


def _refused(argv: list[str], capsys) -> str:
    """stderr of `pods ARGV` run in this process, which must exit with status 2."""
    from pods.cli import main

    try:
        code = main(argv)
    except SystemExit as exit_:  # argparse's own refusals
        code = exit_.code
    assert code == 2
    return " ".join(capsys.readouterr().err.split())


@pytest.fixture
def no_model_loads(monkeypatch):
    def load(*args, **kwargs):
        raise AssertionError("a model loaded")

    monkeypatch.setattr("pods.train.trainer.load_policy", load)
    monkeypatch.setattr("pods.models.policy.load_policy", load)


def test_help_lists_every_command_and_check_and_plan_show_defaults():
    from pods.cli import _parser

    parser = _parser()
    first = parser.description.splitlines()[0]
    assert all(name in first for name in parser.commands), first
    check, plan = (" ".join(parser.commands[c].format_help().split()) for c in ("check", "plan"))
    assert "Train a few steps in every mode this machine can run" in check
    assert "optimizer steps per mode (default: 3)" in check
    assert "Measure the base model's pass rate" in plan
    assert "training prompts sampled (default: 16)" in plan


def test_a_mistyped_or_foreign_flag_names_the_flag_meant(capsys):
    assert "unrecognized arguments: --lrr 3; --lrr: did you mean --lr?" in \
        _refused(["train", "--lrr", "3"], capsys)
    assert "--learning-rate: pods calls it --lr; --learning-rate is a TRL or verl name" in \
        _refused(["train", "--learning-rate", "1e-6"], capsys)
    said = _refused(["plan", "--num-generations=8", "--max-completion-length", "9"], capsys)
    assert "--num-generations: pods calls it --n (rollouts generated per prompt" in said
    assert "--max-completion-length: pods calls it --max-new-tokens" in said


def test_yaml_with_trl_names_or_a_nested_block_says_what_pods_calls_it(tmp_path, capsys):
    config = tmp_path / "trl.yaml"
    config.write_text("n: 8\nlearning_rate: 1.0e-6\n")
    assert f"{config}, line 2: unknown field 'learning_rate'; pods calls it 'lr'" in \
        _refused(["train", "--config", str(config)], capsys)
    config.write_text("model: tiny\nrollout:\n  n: 8\n  temprature: 0.9\n")
    assert f"{config}, line 2: 'rollout' holds a nested block, but pods configs are flat: " \
           "one `key: value` per line at the top level, with no group names. Write n at the " \
           "top level instead. Unknown inside it: temprature (did you mean 'temperature'?)" \
        in _refused(["train", "--config", str(config)], capsys)


def test_device_mistakes_fail_before_the_model_loads(tmp_path, capsys, monkeypatch,
                                                     no_model_loads):
    said = _refused(["train", "--device", "cdua", "--out-dir", str(tmp_path)], capsys)
    assert "pods train: error: unknown device 'cdua'; pods runs on auto, cpu, cuda" in said
    monkeypatch.setattr("torch.version.cuda", None)  # this CPU build of torch, anywhere
    monkeypatch.setattr("torch.version.hip", None)
    monkeypatch.setattr("torch.cuda.is_available", lambda: False)
    said = _refused(["train", "--device", "cuda", "--out-dir", str(tmp_path)], capsys)
    assert "--device cuda needs a CUDA build of torch" in said and "pip install torch" in said
    assert "Traceback" not in said and list(tmp_path.iterdir()) == []


def test_float16_is_refused_for_a_full_fine_tune(tmp_path, capsys, no_model_loads):
    said = _refused(["train", "--dtype", "float16", "--out-dir", str(tmp_path)], capsys)
    assert "dtype float16 for a full fine-tune: float16's range (6e-8 to 65504) is too " \
           "narrow for training without loss scaling" in said
    assert "use --dtype bfloat16" in said and "would not move" not in said
    from pods.config import from_dict

    assert from_dict({"dtype": "float16", "lora_rank": 8}).model.dtype == "float16"  # LoRA
    assert from_dict({"dtype": "float16"}).model.dtype == "float16"  # pods eval may use it


def test_eval_of_a_path_that_does_not_exist_fails_at_once(tmp_path, capsys, monkeypatch,
                                                          no_model_loads):
    monkeypatch.chdir(tmp_path)
    # ("out/model" beside an existing out/ stays a hub id, as transformers reads it: a
    # folder named like a hub organisation must not hide the hub's model)
    for path in ("runs/none", "./gone", "../gone", "a/b/gone"):
        said = _refused(["eval", path, "--task", "gsm8k"], capsys)
        assert f"pods eval: error: the model path {path} does not exist" in said
