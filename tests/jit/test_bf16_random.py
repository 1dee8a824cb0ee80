"""Random kernels of one to three bf16 gemms, some in batch loops (a C per member, or one C
they all update), against float64 products of the same inputs: the tile-register budget of
a function's AMX gemms (exact tiles, packed blocks or vector nanokernels for each), packing
ahead in loops, batch-reduce loops on tiles, transposes, alpha and beta, f32 and bf16 C.
The same kernels run on AVX512-BF16's vdpbf16ps nanokernels (VNNI packs, A's pairs
unpacked in the K loop). Seeded, so every run draws the same kernels."""

from __future__ import annotations

import random
from dataclasses import dataclass

import ml_dtypes
import numpy as np
import pytest

import nanotc
from nanotc import targets

BF16 = ml_dtypes.bfloat16
# the bf16 gemm paths this host runs: AMX tiles, vdpbf16ps nanokernels
TARGETS = [t for t in ("amx", "avx512") if targets.runs_on_host(targets.get(t))]


@dataclass(frozen=True)
class RandomGemm:
    index: int
    m: int
    n: int
    k: int
    trans: tuple[str, str]
    out: str
    alpha: float
    beta: float
    batch: int | None  # batch members, one gemm per iteration of a loop; None: one gemm
    reduce: bool = False  # the loop's gemms all update one C (a batch-reduce loop if beta = 1)

    @staticmethod
    def draw(index: int, r: random.Random) -> RandomGemm:
        small = r.random() < 0.7
        m, n, k = (
            (r.randint(1, 64), r.randint(1, 64), r.randint(1, 128))
            if small
            else (r.randint(30, 200), r.randint(30, 100), r.randint(30, 300))
        )
        trans = (r.choice("nt"), r.choice("nt"))
        batch = r.randint(1, 4) if r.random() < 0.5 else None
        reduce = batch is not None and r.random() < 0.5
        beta = 1.0 if reduce and r.random() < 0.7 else r.choice([0.0, 1.0, -2.0])
        return RandomGemm(index, m, n, k, trans, r.choice(["f32", "bf16"]),
                          r.choice([1.0, 0.5]), beta, batch, reduce)  # fmt: skip

    def shapes(self) -> tuple[tuple[int, int], tuple[int, int], tuple[int, int]]:
        ta, tb = self.trans
        a = (self.k, self.m) if ta == "t" else (self.m, self.k)
        b = (self.n, self.k) if tb == "t" else (self.k, self.n)
        return a, b, (self.m, self.n)

    def types(self, batched: bool) -> list[str]:
        extra = ["x?" if batched else ""] * 2 + ["x?" if batched and not self.reduce else ""]
        elements = ("bf16", "bf16", self.out)
        return [f"memref<{e}x{s[0]}x{s[1]}{x}>" for e, s, x in zip(elements, self.shapes(), extra)]

    def text(self) -> tuple[list[str], str]:
        """The parameters and the body lines of this gemm."""
        i, (ta, tb) = self.index, self.trans
        full, member = self.types(self.batch is not None), self.types(False)
        params = [f"%{x}{i}: {t}" for x, t in zip("ABC", full)]
        gemm = f"gemm.{ta}.{tb} {self.alpha}, %a{i}, %b{i}, {self.beta}, %c{i} : f32, " + ", ".join(
            [member[0], member[1], "f32", member[2]]
        )
        if self.batch is None:
            return params, "  " + gemm.replace(f"%a{i}", f"%A{i}").replace(
                f"%b{i}", f"%B{i}"
            ).replace(f"%c{i}", f"%C{i}")
        viewed = "AB" if self.reduce else "ABC"
        views = [
            f"    %{x.lower()}{i} = subview %{x}{i}[:,:,%i{i}] : {t}" for x, t in zip(viewed, full)
        ]
        if self.reduce:
            gemm = gemm.replace(f"%c{i}", f"%C{i}")
        body = "\n".join(
            [f"  %n{i} = size %A{i}[2] : {full[0]}", f"  for %i{i} = 0, %n{i} {{", *views,
             "    " + gemm, "  }"]
        )  # fmt: skip
        return params, body

    def arrays(self, rng: np.random.Generator) -> list[np.ndarray]:
        extra = () if self.batch is None else (self.batch,)
        extras = [extra, extra, () if self.reduce else extra]
        dtypes = (BF16, BF16, np.float32 if self.out == "f32" else BF16)
        return [np.asfortranarray(rng.standard_normal(s + x)).astype(d)
                for s, x, d in zip(self.shapes(), extras, dtypes)]  # fmt: skip

    def check(self, a: np.ndarray, b: np.ndarray, c0: np.ndarray, c: np.ndarray) -> None:
        """Within 4 eps (sqrt(K) + 4) of the float64 result, relative to |alpha| |A| |B| +
        |beta| |C| per element (eps of C's type: f32 accumulation, one rounding to bf16)."""
        ta, tb = self.trans
        x, y = (np.moveaxis(np.atleast_3d(v.astype(np.float64)), 2, 0) for v in (a, b))
        x = x.transpose(0, 2, 1) if ta == "t" else x
        y = y.transpose(0, 2, 1) if tb == "t" else y
        product, bound = x @ y, np.abs(x) @ np.abs(y)
        c_old = np.moveaxis(np.atleast_3d(c0.astype(np.float64)), 2, 0)
        if self.reduce:  # in loop order, each update of C from the one before
            want, scale = c_old[0], np.abs(c_old[0])
            for p, q in zip(product, bound):
                want = self.alpha * p + self.beta * want
                scale = abs(self.alpha) * q + abs(self.beta) * scale
            want, scale = want[None], scale[None] * len(product)
        else:
            want = self.alpha * product + self.beta * c_old
            scale = abs(self.alpha) * bound + abs(self.beta) * np.abs(c_old)
        got = np.moveaxis(np.atleast_3d(c.astype(np.float64)), 2, 0)
        eps = float(ml_dtypes.finfo(np.float32 if self.out == "f32" else BF16).eps)
        assert np.all(np.abs(got - want) <= 4 * eps * (np.sqrt(self.k) + 4) * scale + 1e-30)


@pytest.mark.skipif(not TARGETS, reason="this host has neither AMX nor AVX512-BF16")
@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("seed", range(40))
def test_random_bf16_kernels(seed: int, target: str) -> None:
    r, rng = random.Random(seed), np.random.default_rng(seed)
    gemms = [RandomGemm.draw(i, r) for i in range(r.randint(1, 3))]
    params, body = zip(*(g.text() for g in gemms))
    text = f"func @k({', '.join(p for ps in params for p in ps)}) {{\n" + "\n".join(body) + "\n}"
    arrays = [g.arrays(rng) for g in gemms]
    initial = [c.copy(order="F") for _, _, c in arrays]
    nanotc.compile(text, target=target)["k"](*(x for xs in arrays for x in xs), group_size=1)
    for g, (a, b, c), c0 in zip(gemms, arrays, initial):
        g.check(a, b, c0, c)
