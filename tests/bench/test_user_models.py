"""Your own model in a few lines: the documented Python example runs as written; architectures by name with weights
from a local file (torchvision; timm when installed); the command-line path through a suite's plugin; and one-line
errors for a wrong file, name or geometry."""

import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import faithbench
from faithbench.errors import UserError
from faithbench.models import MODELS

ROOT = Path(__file__).resolve().parents[2]


def _blocks(language: str, page: str = "own-model.md") -> list[str]:
    """The ``language`` code blocks of the documentation page ``page``, in order."""
    return re.findall(rf"```{language}\n(.*?)```", (ROOT / "docs" / page).read_text(), re.S)


def _docs_example(page: str) -> str:
    """The first python block of the documentation page ``page``."""
    return _blocks("python", page)[0]


def test_the_documented_own_model_example_runs_as_written(tmp_path, monkeypatch, capsys):
    code = _docs_example("own-model.md")
    assert len([line for line in code.splitlines() if line.strip()]) <= 10
    monkeypatch.chdir(tmp_path)
    exec(compile(code, "docs/own-model.md", "exec"), {})
    out = capsys.readouterr().out
    assert "mine" in out and "input_x_gradient" in out and "deletion" in out
    MODELS.unregister("mine")


def test_weights_from_a_local_file_and_clear_errors(tmp_path):
    trained = faithbench.torchvision_model("resnet18", num_classes=10, seed=1)
    torch.save(trained.state_dict(), tmp_path / "w.pt")
    loaded = faithbench.torchvision_model("resnet18", num_classes=10, weights=tmp_path / "w.pt")
    pairs = zip(trained.state_dict().values(), loaded.state_dict().values(), strict=True)
    assert all(torch.equal(a, b) for a, b in pairs)
    random0 = faithbench.torchvision_model("resnet18", num_classes=10)
    assert not torch.equal(random0.fc.weight, trained.fc.weight)  # seeded random weights without a file
    assert torch.equal(random0.fc.weight, faithbench.torchvision_model("resnet18", num_classes=10).fc.weight)
    with pytest.raises(UserError, match="does not exist"):
        faithbench.torchvision_model("resnet18", num_classes=10, weights=tmp_path / "missing.pt")
    (tmp_path / "bad.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(UserError, match="cannot read weights file"):
        faithbench.torchvision_model("resnet18", num_classes=10, weights=tmp_path / "bad.pt")
    with pytest.raises(UserError, match="does not fit the architecture"):
        faithbench.torchvision_model("resnet34", num_classes=10, weights=tmp_path / "w.pt")
    with pytest.raises(UserError, match="unknown torchvision architecture 'resnet17'"):
        faithbench.torchvision_model("resnet17", num_classes=10)


def test_wrap_model_checks_its_arguments_and_reads_the_class_count():
    net = faithbench.torchvision_model("resnet18", num_classes=7)
    adapter = faithbench.wrap_model(net, name="mine_seven", input_size=(64, 64))
    assert adapter.num_classes == 7 and MODELS.get("mine_seven").source == "user"
    faithbench.wrap_model(net, name="mine_seven", input_size=(64, 64))  # the user's own name: replaced
    with pytest.raises(UserError, match="taken by a built-in model"):
        faithbench.wrap_model(net, name="cnn_mnist", input_size=(64, 64))
    with pytest.raises(UserError, match="conv_layer 'layer9'"):
        faithbench.wrap_model(net, name="mine_seven", input_size=(64, 64), conv_layer="layer9")
    with pytest.raises(UserError, match="both mean and std"):
        faithbench.wrap_model(net, name="mine_seven", input_size=(64, 64), mean=(0.5,) * 3)
    MODELS.unregister("mine_seven")


def test_the_documented_timm_example_runs_as_written(tmp_path, monkeypatch, capsys):
    pytest.importorskip("timm")
    monkeypatch.chdir(tmp_path)
    exec(compile(_blocks("python")[1], "docs/own-model.md", "exec"), {})
    assert "my_timm" in capsys.readouterr().out
    MODELS.unregister("my_timm")


def test_the_documented_text_folder_example_runs_as_written(tmp_path, monkeypatch, capsys):
    _text_folder(tmp_path, "bert", tmp_path / "my_bert")
    monkeypatch.chdir(tmp_path)
    exec(compile(_blocks("python")[2], "docs/own-model.md", "exec"), {})
    out = capsys.readouterr().out
    assert "my_bert" in out and "input_x_gradient" in out
    MODELS.unregister("my_bert")


def test_the_documented_tensors_in_example_runs_as_written(capsys):
    exec(compile(_blocks("python")[4], "docs/own-model.md", "exec"), {})
    assert "tensor(" in capsys.readouterr().out


def test_the_documented_own_method_example_runs_as_written(capsys):
    from faithbench.attributions import METHODS

    try:
        exec(compile(_blocks("python")[5], "docs/own-model.md", "exec"), {"__name__": "__main__"})
    finally:  # the registry is the process's: other tests list it
        METHODS._entries.pop("gradient_squared", None)
    assert "gradient_squared" in capsys.readouterr().out


def test_the_documented_command_line_example_scores_a_checkpoint_file(tmp_path):
    plugin, suite, command = _blocks("python")[3], _blocks("toml")[0], _blocks("bash")[0].strip()
    torch.save(faithbench.torchvision_model("resnet18", num_classes=10, seed=3).state_dict(), tmp_path / "mine.pt")
    (tmp_path / "my_models.py").write_text(plugin)
    (tmp_path / "mine.toml").write_text(suite)
    argv = command.split()
    assert argv[:2] == ["python", "-m"]
    proc = subprocess.run([sys.executable, *argv[1:], "--no-progress"], capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-1500:]
    assert "mine" in proc.stdout and (tmp_path / "runs" / "mine" / "results.csv").exists()


def _text_folder(tmp_path, kind: str, folder: Path | None = None) -> Path:
    """A small sequence classifier of ``kind`` saved as a researcher would (save_pretrained + tokenizer.json)."""
    import shutil

    import transformers

    from faithbench.models.nets.text_transformer import minilm_folder

    torch.manual_seed(0)
    small = {"vocab_size": 30522, "max_position_embeddings": 512, "num_labels": 2}
    if kind == "bert":
        config = transformers.BertConfig(
            hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64, **small
        )
        net = transformers.BertForSequenceClassification(config)
    else:
        config = transformers.DistilBertConfig(dim=32, n_layers=2, n_heads=2, hidden_dim=64, **small)
        net = transformers.DistilBertForSequenceClassification(config)
    folder = folder or tmp_path / kind
    net.save_pretrained(folder)
    shutil.copy(minilm_folder() / "tokenizer.json", folder / "tokenizer.json")
    return folder


@pytest.mark.parametrize("kind", ["bert", "distilbert"])
def test_a_text_classifier_from_a_local_folder_keeps_its_logits_and_runs_a_suite(tmp_path, kind):
    import transformers

    from faithbench.models.text_encoding import tokenize

    folder = _text_folder(tmp_path, kind)
    adapter = faithbench.wrap_text_model(folder, name=f"my_{kind}")
    ids, vocab = tokenize(["A gripping, beautifully acted film.", "Dull."], tokenizer=str(folder))
    mask = ids.ne(vocab.pad)
    theirs = transformers.AutoModelForSequenceClassification.from_pretrained(folder).eval()
    with torch.no_grad():
        expected = theirs(input_ids=ids, attention_mask=mask.long()).logits
        ours = adapter.module.transformer(ids, mask)
    assert torch.allclose(ours, expected, atol=1e-5), (ours, expected)
    results = faithbench.benchmark(
        [f"my_{kind}"], ["gradient"], ["comprehensiveness"], dataset="rotten-tomatoes", n_samples=4, out=tmp_path / "o"
    )
    assert results["n"].iloc[0] == 4
    MODELS.unregister(f"my_{kind}")
    with pytest.raises(UserError, match="no tokenizer.json"):
        (folder / "tokenizer.json").unlink()
        faithbench.wrap_text_model(folder, name="broken")


class _Grey(torch.nn.Module):
    """A tiny digit classifier; ``out`` shapes its output as the mistakes below need."""

    def __init__(self, channels: int = 1, classes: int = 10, out: str = "logits") -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(channels, 4, 3, padding=1)
        self.head = torch.nn.Linear(4, classes)
        self.out = out

    def forward(self, x):
        logits = self.head(self.conv(x).mean(dim=(2, 3)))
        if self.out == "softmax":
            return logits.softmax(dim=1)
        return (logits, x.mean()) if self.out == "tuple" else logits


def test_a_users_model_is_checked_before_compute_each_mistake_one_line(tmp_path, capsys):
    wrap = faithbench.wrap_model
    with pytest.raises(UserError, match=r"model 'x' fails on images of shape \(4, 1, 28, 28\).*check channels"):
        wrap(_Grey(channels=3), name="x", input_size=(28, 28), mean=(0.5,), std=(0.5,))  # one value: 1 channel
    with pytest.raises(UserError, match=r"channels=3 but mean and std have 1 value"):
        wrap(_Grey(channels=3), name="x", input_size=(28, 28), mean=(0.5,), std=(0.5,), channels=3)
    with pytest.raises(UserError, match=r"returns a tuple, not a tensor of logits; pass logits=0"):
        wrap(_Grey(out="tuple"), name="x", input_size=(28, 28), channels=1)
    chosen = wrap(_Grey(out="tuple"), name="x", input_size=(28, 28), channels=1, logits=0, conv_layer="conv")
    assert chosen.num_classes == 10 and chosen.conv_layer == "module.conv"
    with pytest.raises(UserError, match=r"model 'x' has float64 weights.*model.float\(\)"):
        wrap(_Grey().double(), name="x", input_size=(28, 28), channels=1)
    with pytest.warns(UserWarning, match="seems to return probabilities"):
        wrap(_Grey(out="softmax"), name="x", input_size=(28, 28), channels=1)
    with pytest.raises(UserError, match="num_classes=5 but it returns 10 logits"):
        wrap(_Grey(), name="x", input_size=(28, 28), channels=1, num_classes=5)

    def fails(net, size, dataset, match):
        wrap(net, name="x", input_size=(size, size), channels=net.conv.in_channels)
        with pytest.raises(UserError, match=match):
            faithbench.benchmark(["x"], ["gradient"], ["entropy"], dataset=dataset, n_samples=2, out=tmp_path / "r")
        assert not (tmp_path / "r" / "results.csv").exists()

    fails(_Grey(channels=3), 28, "mnist", r"reads 3-channel images but dataset 'mnist' has 1-channel.*channels=1")
    fails(_Grey(channels=3), 32, "mnist-224", r"input_size=\(32, 32\) but dataset 'mnist-224' has 224 x 224 px")
    fails(_Grey(classes=5), 28, "mnist", r"predicts 5 classes but dataset 'mnist' has labels up to 9")
    wrap(_Grey(), name="x", input_size=(28, 28), channels=1)
    faithbench.benchmark(["x"], ["gradient"], ["entropy"], n_samples=2, out=tmp_path / "ok")
    assert re.search(r"model x: \d+\.\d % of 512 held-out images of mnist right \(chance \d+\.\d %\)",
                     capsys.readouterr().err)  # fmt: skip
    MODELS.unregister("x")


def test_plugins_from_the_command_line_and_the_console_scripts_rescore(tmp_path):
    """``run --plugins`` asks a question with a plugin in the working directory; ``faithbench rescore`` (the console
    script, which puts no folder on the path) finds it again."""
    import os
    import shutil

    console = shutil.which("faithbench")
    if console is None:
        pytest.skip("the faithbench console script is not on PATH")
    (tmp_path / "tiny_models.py").write_text(
        f"import faithbench\nfrom {__name__} import _Grey\n"
        'faithbench.wrap_model(_Grey(), name="tiny", input_size=(28, 28), channels=1)\n'
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}  # for this test module's _Grey; the plugin is found in the cwd
    ask = ["run", "--plugins", "tiny_models", "--models", "tiny", "--methods", "gradient", "--metrics",
           "pixel_deletion", "--n-samples", "2", "--out", "q", "--no-progress", "--no-report"]  # fmt: skip
    proc = subprocess.run([console, *ask], capture_output=True, text=True, cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stderr[-1500:]
    assert "model tiny:" in proc.stderr
    proc = subprocess.run([console, "rescore", "q", "--set", "deletion.baseline=blur", "--out", "r"],
                          capture_output=True, text=True, cwd=tmp_path, env=env)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-1500:]
    assert (tmp_path / "r" / "results.csv").exists()


def test_a_relative_weights_path_is_read_beside_the_code_that_names_it(tmp_path, monkeypatch):
    import importlib.util

    (tmp_path / "plug").mkdir()
    torch.save(faithbench.torchvision_model("resnet18", num_classes=3, seed=5).state_dict(), tmp_path / "plug" / "w.pt")
    (tmp_path / "plug" / "p.py").write_text(
        'import faithbench\nnet = faithbench.torchvision_model("resnet18", num_classes=3, weights="w.pt")\n'
    )
    monkeypatch.chdir(tmp_path)  # not the plugin's folder
    spec = importlib.util.spec_from_file_location("p_plugin", tmp_path / "plug" / "p.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert torch.equal(module.net.fc.weight, faithbench.torchvision_model("resnet18", num_classes=3, seed=5).fc.weight)
    with pytest.raises(UserError, match="weights file w.pt does not exist"):
        faithbench.torchvision_model("resnet18", num_classes=3, weights="w.pt")  # from here: no such file here
