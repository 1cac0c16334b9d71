"""The sdpa rewrite on masked, dropped-out attention: KernelBench's MinGPT causal attention
(masked_fill of a tril buffer with -inf, then an nn.Dropout) becomes one
scaled_dot_product_attention call with the same outputs; masks computed from the scores, or
filled with anything but -inf, are left alone."""

from __future__ import annotations

import pytest
from test_recipes import assert_same_outputs

from stratagem.domains import parse_problem
from stratagem.domains.pytorch.recipes import catalog as rc
from stratagem.domains.pytorch.static.checks import run_static_checks

MINGPT = '''\
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """Causal self-attention as in KernelBench level 3's MinGPT."""

    def __init__(self, n_embd, n_head, attn_pdrop, resid_pdrop, max_seqlen):
        super().__init__()
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.c_proj = nn.Linear(n_embd, n_embd)
        self.attn_dropout = nn.Dropout(attn_pdrop)
        self.resid_dropout = nn.Dropout(resid_pdrop)
        self.register_buffer("bias", torch.tril(torch.ones(max_seqlen, max_seqlen))
                             .view(1, 1, max_seqlen, max_seqlen))
        self.n_head = n_head
        self.n_embd = n_embd

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float('-inf'))
        att = F.softmax(att, dim=-1)
        att = self.attn_dropout(att)
        y = att @ v
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        y = self.resid_dropout(self.c_proj(y))
        return y


batch_size = 2
max_seqlen = 16
seq_len = 12
n_embd = 32
n_head = 4
attn_pdrop = 0.0
resid_pdrop = 0.0


def get_inputs():
    return [torch.randn(batch_size, seq_len, n_embd)]


def get_init_inputs():
    return [n_embd, n_head, attn_pdrop, resid_pdrop, max_seqlen]
'''

TIGHT = {"float32": {"atol": 1e-5, "rtol": 1e-5}}


def problem(src: str = MINGPT):
    return parse_problem(src, name="mingpt", domain="pytorch")


def sdpa_applies(src: str) -> bool:
    return rc.BY_NAME["sdpa"].applies(problem(src), TIGHT, False)


@pytest.mark.parametrize("variant", [
    MINGPT,
    MINGPT.replace("att = self.attn_dropout(att)", "att = F.dropout(att, p=0.0, training=self.training)"),
    MINGPT.replace("att.masked_fill(self.bias[:, :, :T, :T] == 0, float('-inf'))",
                   "torch.masked_fill(att, self.bias[:, :, :T, :T] == 0, -math.inf)"),
    MINGPT.replace("        att = self.attn_dropout(att)\n", ""),
])
def test_masked_causal_attention_with_dropout_becomes_one_sdpa_call(variant: str) -> None:
    assert sdpa_applies(variant)
    p = problem(variant)
    src = rc.render(p.source, [rc.BY_NAME["sdpa"]])
    body = src.split("class ModelNew")[0]  # the rewritten reference, which ModelNew wraps
    assert "scaled_dot_product_attention" in body and "softmax" not in body and "masked_fill" not in body
    assert "attn_mask=torch.logical_not(" in body
    assert run_static_checks(p, src).outcome == "passed"
    assert_same_outputs(p, src, atol=1e-5)


def test_the_dropout_stays_active_in_training_as_the_module_was() -> None:
    src = rc.render(MINGPT, [rc.BY_NAME["sdpa"]])
    assert "dropout_p=self.attn_dropout.p if self.training else 0.0" in src


@pytest.mark.parametrize("change", [
    ("float('-inf')", "0.0"),  # filled with a value: not a mask
    ("self.bias[:, :, :T, :T] == 0", "att > 10.0"),  # a mask computed from the scores
    ("att = self.attn_dropout(att)", "att = self.attn_dropout(att) * 2.0"),  # more than a dropout
])
def test_other_masks_and_wrappers_are_left_alone(change: tuple[str, str]) -> None:
    assert not sdpa_applies(MINGPT.replace(*change))
