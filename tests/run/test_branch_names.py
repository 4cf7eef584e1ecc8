"""Branch and region names say where they are in the model, for graphs from torch.fx and torch.export.

Small models of our own (an Inception-like block inside named blocks, two parallel stages as HRNet
has, an encoder/decoder pair, one tower applied to two inputs) and small random Hugging Face models
built from their configs (as tests/run/test_hf_models.py builds its own).
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from branchscope.profiling.run.branches import find_branches
from branchscope.profiling.run.graph_tracers import EXPORT_NON_STRICT, FX
from branchscope.profiling.trace.run_info import branch_label, branch_name


@pytest.fixture(params=["fx", "export"])
def tracer(request, monkeypatch):
    """Each test runs on the graph of torch.fx and on that of torch.export (fx made to fail)."""
    if request.param == "export":

        def refuse(*_args, **_kwargs):
            raise RuntimeError("torch.fx refused for this test")

        monkeypatch.setattr(torch.fx, "symbolic_trace", refuse)
        return EXPORT_NON_STRICT
    return FX


def _analyse(model, *inputs):
    return find_branches(model.eval(), inputs)


def _names(analysis):
    return [[b.name for b in region.branches] for region in analysis.regions]


def _assert_labels_carry_the_names(analysis):
    names = [row["name"] for row in analysis.to_json()]
    assert len(set(names)) == len(names)
    for name in names:
        label = branch_label(name)
        assert label.isascii() and "\\" not in label, label  # TorchScript: "unknown"; the export: "/"
        assert branch_name(label) == name


# ---------------------------------------------------------------- an Inception-like block, twice


class Conv(nn.Module):
    def __init__(self, cin, cout, k=1):
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, k, padding=k // 2, bias=False)
        self.bn = nn.BatchNorm2d(cout)

    def forward(self, x):
        return F.relu(self.bn(self.conv(x)))


class InceptionBlock(nn.Module):
    """Three branches read x: a 1x1 conv, two 3x3 convs in a row, and a max pool (no module of its own)."""

    def __init__(self, c):
        super().__init__()
        # narrow convolutions, so the pool's work is no small share of the largest branch's
        self.branch1x1 = Conv(c, 2)
        self.branch3x3_1 = Conv(c, 2)
        self.branch3x3_2 = Conv(2, 2, 3)
        self.reduce = Conv(4 + c, c)

    def forward(self, x):
        a = self.branch1x1(x)
        b = self.branch3x3_2(self.branch3x3_1(x))
        pool = F.max_pool2d(x, 3, 1, 1)
        return self.reduce(torch.cat([a, b, pool], 1))


class InceptionNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = Conv(3, 16)
        self.Mixed_a = InceptionBlock(16)
        self.Mixed_b = InceptionBlock(16)

    def forward(self, x):
        return self.Mixed_b(self.Mixed_a(self.stem(x)))


def test_inception_blocks_name_their_branches_and_regions_by_the_block(tracer):
    analysis = _analyse(InceptionNet(), torch.randn(1, 3, 8, 8))
    assert analysis.tracer == tracer
    assert _names(analysis) == [
        # the block's own name first, never `branch1x1` alone; the pool has no module: its function is named
        [f"{block}.branch1x1", f"{block}: branch3x3_1 → branch3x3_2", f"{block}: max_pool2d"]
        for block in ("Mixed_a", "Mixed_b")
    ]
    assert [r.name for r in analysis.regions] == ["Mixed_a", "Mixed_b"]
    assert {row["region_name"] for row in analysis.to_json() if row["region"] == "2"} == {"Mixed_b"}
    _assert_labels_carry_the_names(analysis)


# ---------------------------------------------------------------- two parallel stages (HRNet)


class Stage(nn.Module):
    def __init__(self):
        super().__init__()
        self.branches = nn.ModuleList(nn.Sequential(Conv(4, 4, 3), Conv(4, 4, 3)) for _ in range(2))

    def forward(self, xs):
        return [branch(x) for branch, x in zip(self.branches, xs)]


class TwoResolutions(nn.Module):
    """A transition makes two resolutions, each runs its own branch of stage2, then they meet."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU())
        self.transition1 = nn.ModuleList(
            [Conv(4, 4, 3), nn.Sequential(nn.Conv2d(4, 4, 3, stride=2, padding=1), nn.ReLU())]
        )
        self.stage2 = nn.ModuleList([Stage()])

    def forward(self, x):
        x = self.stem(x)
        xs = [t(x) for t in self.transition1]
        high, low = self.stage2[0](xs)
        return high + F.interpolate(low, size=high.shape[-2:])


def test_parallel_stages_keep_the_path_down_to_the_component_that_tells_them_apart(tracer):
    analysis = _analyse(TwoResolutions(), torch.randn(1, 3, 8, 8))
    (region,) = analysis.regions
    # `transition1 → stage2` twice before (the second `#2`)
    assert sorted(b.name for b in region.branches) == [
        "transition1.0 → stage2.0.branches.0",
        "transition1.1 → stage2.0.branches.1",
    ]
    # the branches share no module path: the region is named after the module its fork comes out of
    assert region.name == "after stem.1"
    _assert_labels_carry_the_names(analysis)


# ---------------------------------------------------------------- an encoder/decoder pair


class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Linear(8, 16)
        self.layers = nn.Sequential(nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 16))

    def forward(self, x):
        return self.layers(self.embed(x))


class CrossLayer(nn.Module):
    def __init__(self):
        super().__init__()
        self.self_proj = nn.Linear(16, 16)
        self.q = nn.Linear(16, 16)
        self.k = nn.Linear(16, 16)
        self.v = nn.Linear(16, 16)

    def forward(self, x, memory):
        key, value = self.k(memory), self.v(memory)  # the cross-attention's K/V read the encoder's output
        h = torch.relu(self.self_proj(x))
        scores = torch.softmax(self.q(h) @ key.transpose(-1, -2), -1)
        return h + scores @ value


class Decoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Linear(8, 16)
        self.layers = nn.ModuleList([CrossLayer()])

    def forward(self, x, memory):
        x = self.embed(x)
        for layer in self.layers:
            x = layer(x, memory)
        return x


class EncoderDecoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = Encoder()
        self.decoder = Decoder()

    def forward(self, src, tgt):
        return self.decoder(tgt, self.encoder(src))


def test_encoder_decoder_branches_say_which_part_of_the_decoder_each_runs(tracer):
    analysis = _analyse(EncoderDecoder(), torch.randn(2, 5, 8), torch.randn(2, 3, 8))
    (region,) = analysis.regions
    # before: `decoder` and `encoder → decoder`, though both run parts of the decoder's one layer
    assert sorted(b.name for b in region.branches) == [
        "decoder.embed → decoder.layers.0: self_proj → q",
        "encoder → decoder.layers.0: k → v",
    ]
    assert region.name == "tgt, src"  # no module path in common: the values it starts from
    _assert_labels_carry_the_names(analysis)


# ---------------------------------------------------------------- names that would repeat


class Siamese(nn.Module):
    """One tower applied to two inputs: the two branches run the same modules."""

    def __init__(self):
        super().__init__()
        self.tower = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 8))

    def forward(self, a, b):
        return self.tower(a) * self.tower(b)


def test_branches_running_the_same_modules_say_what_they_read(tracer):
    analysis = _analyse(Siamese(), torch.randn(2, 8), torch.randn(2, 8))
    (region,) = analysis.regions
    names = [b.name for b in region.branches]
    assert [n.rsplit(" (from ", 1)[1] for n in names] == ["a)", "b)"]
    assert names[0].rsplit(" (from ", 1)[0] == names[1].rsplit(" (from ", 1)[0]
    assert names[0].startswith("tower.0")
    assert region.name == "tower"
    _assert_labels_carry_the_names(analysis)


class Unicode(nn.Module):
    def __init__(self):
        super().__init__()
        self.heads = nn.ModuleDict({"café": nn.Linear(8, 8), "naïve->x": nn.Linear(8, 8)})

    def forward(self, x):
        return self.heads["café"](x) + self.heads["naïve->x"](x)


def test_names_of_modules_in_any_script_keep_their_characters_under_ascii_labels(tracer):
    analysis = _analyse(Unicode(), torch.randn(2, 8))
    assert _names(analysis) == [["heads.café", "heads.naïve-x"]]  # "->" would read back as "→"
    _assert_labels_carry_the_names(analysis)


class LongChain(nn.Module):
    def __init__(self):
        super().__init__()
        self.block = nn.ModuleDict({f"c{k}": nn.Linear(8, 8) for k in range(1, 6)})
        self.block["shortcut"] = nn.Linear(8, 8)

    def forward(self, x):
        y = x
        for k in range(1, 6):
            y = torch.relu(self.block[f"c{k}"](y))
        return y + self.block["shortcut"](x)


def test_a_long_chain_says_its_module_once_and_is_cut_in_the_middle(tracer):
    analysis = _analyse(LongChain(), torch.randn(2, 8))
    assert _names(analysis) == [["block: c1 → c2 → ... → c5", "block.shortcut"]]
    _assert_labels_carry_the_names(analysis)


def test_nested_regions_in_one_block_are_told_apart_by_their_fork():
    class Split(nn.Module):  # InceptionE: inside one branch, a value feeds two sub-branches
        def __init__(self):
            super().__init__()
            self.left = nn.Linear(8, 8)
            self.stem = nn.Linear(8, 8)
            self.sub_a = nn.Linear(8, 8)
            self.sub_b = nn.Linear(8, 8)

        def forward(self, x):
            s = self.stem(x)
            return torch.cat([self.left(x), torch.cat([self.sub_a(s), self.sub_b(s)], 1)], 1)

    class Outer(nn.Module):
        def __init__(self):
            super().__init__()
            self.block = Split()

        def forward(self, x):
            return self.block(x)

    analysis = _analyse(Outer(), torch.randn(2, 8))
    (top,) = analysis.regions
    assert top.name == "block"
    (nested,) = top.branches[1].regions
    assert [b.name for b in nested.branches] == ["block.sub_a", "block.sub_b"]
    assert nested.name == "after block.stem"  # `block` is the outer region's already
    assert [(row["region"], row["region_name"]) for row in analysis.to_json()] == [
        ("1", "block"), ("1", "block"), ("1.1", "after block.stem"), ("1.1", "after block.stem"),
    ]  # fmt: skip


# ---------------------------------------------------------------- torch.fx's failures in plain words


class CallsLen(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(8, 8), nn.Linear(8, 8)

    def forward(self, x):
        return self.a(x[: len(x)]) * self.b(x)


class WritesByIndex(nn.Module):
    def forward(self, x):
        x = x.clone()
        x[0] = 1.0
        return x


class BranchesOnValues(nn.Module):
    def forward(self, x):
        return x * 2 if x.sum() > 0 else x


@pytest.mark.parametrize(
    ("model", "words", "detail"),
    [
        (CallsLen(), "the model calls len() on a tensor", "RuntimeError: 'len' is not supported in symbolic tracing"),
        (WritesByIndex(), "the model writes into a tensor by index (`x[i] = ...`)",
         "TypeError: 'Proxy' object does not support item assignment"),
        (BranchesOnValues(), "the model's control flow depends on tensor values (an `if` or `while` on a tensor)",
         "TraceError: symbolically traced variables cannot be used as inputs to control flow"),
    ],
)  # fmt: skip
def test_fx_failures_read_in_plain_words_with_fxs_message_after(model, words, detail):
    analysis = find_branches(model, (torch.randn(3, 8),))
    text = analysis.tracer_errors[FX]
    assert text.startswith(f"torch.fx could not trace {type(model).__name__}: {words} ({detail}")
    assert text.endswith(")") and "\n" not in text


# ---------------------------------------------------------------- real Hugging Face models, random weights


def _t5():
    from transformers import T5Config, T5Model

    torch.manual_seed(0)
    config = T5Config(vocab_size=128, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_decoder_layers=2,
                      num_heads=4, use_cache=False)  # fmt: skip
    ids = torch.randint(0, 128, (1, 8))
    return T5Model(config).eval(), {"input_ids": ids, "decoder_input_ids": ids}


def _clip():
    from transformers import CLIPConfig, CLIPModel

    torch.manual_seed(0)
    config = CLIPConfig(
        text_config=dict(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, max_position_embeddings=16, bos_token_id=0, eos_token_id=1),
        vision_config=dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                           image_size=32, patch_size=8),
        projection_dim=16,
    )  # fmt: skip
    return CLIPModel(config).eval(), {"input_ids": torch.randint(2, 128, (2, 8)), "pixel_values": torch.randn(2, 3, 32, 32)}


def test_t5_names_the_encoder_branch_by_the_decoders_cross_attention_it_feeds():
    model, kwargs = _t5()
    analysis = find_branches(model, (), kwargs)
    assert analysis.tracer == EXPORT_NON_STRICT
    assert analysis.tracer_errors[FX] == (
        "torch.fx could not trace T5Model: torch.fx cannot trace the model's Python code "
        "(ValueError: code: co_varnames is too small)"
    )
    names = [row["name"] for row in analysis.to_json()]
    # before: `decoder` and `encoder → decoder`
    assert "encoder → decoder.block.0.layer.1.EncDecAttention: k → v" in names
    assert "decoder" not in names and "encoder → decoder" not in names
    by_name = {r.name: r for r in _all_regions(analysis.regions)}
    for side in ("encoder", "decoder"):
        qkv = f"{side}.block.0.layer.0.SelfAttention"
        assert [b.name for b in by_name[qkv].branches] == [f"{qkv}.q", f"{qkv}.k", f"{qkv}.v"]
    assert all(row["region_name"] for row in analysis.to_json())
    _assert_labels_carry_the_names(analysis)


def test_clip_towers_and_their_projections_are_named_by_full_paths():
    model, kwargs = _clip()
    analysis = find_branches(model, (), kwargs)
    assert analysis.tracer == EXPORT_NON_STRICT
    top = analysis.regions[0]
    assert [b.name for b in top.branches] == [
        "text_model → text_projection",
        "vision_model → visual_projection",
    ]
    assert top.name == "input_ids, pixel_values"
    by_name = {r.name: r for r in _all_regions(analysis.regions)}
    for tower in ("text_model", "vision_model"):
        for layer in (0, 1):
            attn = f"{tower}.encoder.layers.{layer}.self_attn"
            assert [b.name for b in by_name[attn].branches] == [f"{attn}.{p}_proj" for p in "qkv"]
    _assert_labels_carry_the_names(analysis)


def _all_regions(regions):
    out = []
    for region in regions:
        out.append(region)
        for branch in region.branches:
            out.extend(_all_regions(branch.regions))
    return out
