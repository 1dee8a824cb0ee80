"""Launches that do not say `num_threads` take a chunk per available core, but no more chunks
than give each enough work to pay for its thread (`launcher.chunk_groups`), where the kernel's
work is known in FLOPs (`flops.gemm_work_per_group`); a launch that says it is split as told."""

from __future__ import annotations

import math
from collections.abc import Iterator

import numpy as np
import pytest

from nanotc.frontend.parser import parse
from nanotc.runtime import launcher
from nanotc.transforms.flops import gemm_work_per_group

from .helpers import check_members, compiled, group_members, looped_members

BATCH_REDUCE = """func @k(%A: memref<f64x8x8x4>, %B: memref<f64x8x8x4>, %C: memref<f64x8x8>) {
  for %i = 0, 4 {
    %a = subview %A[:,:,%i] : memref<f64x8x8x4>
    %b = subview %B[:,:,%i] : memref<f64x8x8x4>
    gemm.n.n 1.0, %a, %b, 1.0, %C : f64, memref<f64x8x8>, memref<f64x8x8>, f64, memref<f64x8x8>
  }
}"""

SCALAR_LOOP = """func @k(%A: memref<f32x8x8>, %B: memref<f32x8x8>, %C: memref<f32x8x8>) {
  gemm.n.n 1.0, %A, %B, 1.0, %C : f32, memref<f32x8x8>, memref<f32x8x8>, f32, memref<f32x8x8>
  for %i = 0, 8 {
    %x = load %C[%i, 0] : memref<f32x8x8>
    store %x, %C[0, %i] : memref<f32x8x8>
  }
}"""

SCALAR_OUTSIDE_LOOPS = """func @k(%A: memref<f32x8x8>, %B: memref<f32x8x8>, %C: memref<f32x8x8>) {
  gemm.n.n 1.0, %A, %B, 1.0, %C : f32, memref<f32x8x8>, memref<f32x8x8>, f32, memref<f32x8x8>
  %x = load %C[1, 0] : memref<f32x8x8>
  store %x, %C[0, 1] : memref<f32x8x8>
}"""

AXPBY = """func @k(%x: memref<f32x4096>, %y: memref<f32x4096>) {
    axpby.n 1.0, %x, 1.0, %y : f32, memref<f32x4096>, f32, memref<f32x4096>
}"""

DYNAMIC = """func @k(%A: memref<f32x?x?>, %B: memref<f32x?x?>, %C: memref<f32x?x?>) {
  gemm.n.n 1.0, %A, %B, 1.0, %C : f32, memref<f32x?x?>, memref<f32x?x?>, f32, memref<f32x?x?>
}"""


def work(text: str) -> tuple[int, int] | None:
    return gemm_work_per_group(parse(text).function("k"))


def test_the_work_of_gemm_kernels_is_their_flops_and_widest_c() -> None:
    assert work(group_members("f32", 8, 8, 8)) == (2 * 8**3, 4)
    assert work(group_members("f64", 16, 9, 4)) == (2 * 16 * 9 * 4, 8)
    assert work(group_members("f32", 8, 8, 8, inputs="bf16")) == (2 * 8**3, 4)
    assert work(BATCH_REDUCE) == (4 * 2 * 8**3, 8)  # a static loop of gemms
    assert work(SCALAR_OUTSIDE_LOOPS) == (2 * 8**3, 4)  # a few scalar operations cost nothing


@pytest.mark.parametrize(
    "text",
    [SCALAR_LOOP, AXPBY, DYNAMIC, looped_members("f32", 8, 8, 8)],
    ids=["scalar-loop", "axpby", "dynamic", "run-time-loop"],
)
def test_kernels_whose_work_flops_do_not_tell_have_none(text: str) -> None:
    assert work(text) is None


def test_chunk_groups_give_each_thread_enough_f32_work() -> None:
    f32 = compiled(group_members("f32", 8, 8, 8))["k"]
    f64 = compiled(group_members("f64", 8, 8, 8))["k"]
    assert launcher.chunk_groups(f32.function) == math.ceil(launcher.MIN_CHUNK_F32_FLOPS / 1024)
    assert launcher.chunk_groups(f64.function) == math.ceil(launcher.MIN_CHUNK_F32_FLOPS / 2048)
    assert launcher.chunk_groups(compiled(AXPBY)["k"].function) == 1


@pytest.fixture
def four_cores(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """default_threads() as on a machine of four cores (the splits it gave are cached)."""
    monkeypatch.setattr(launcher, "default_threads", lambda: 4)
    launcher.default_split.cache_clear()
    yield
    launcher.default_split.cache_clear()


@pytest.mark.usefixtures("four_cores")
@pytest.mark.parametrize(
    "batch, chunks", [(1, 1), (64, 1), (195, 1), (196, 2), (300, 3), (5000, 4)]
)
def test_a_launch_without_num_threads_takes_as_many_chunks_as_pay(batch: int, chunks: int) -> None:
    kernel = compiled(group_members("f32", 8, 8, 8))["k"]  # 98 members a chunk
    a = np.zeros((8, 8, batch), np.float32, order="F")
    assert (
        len(kernel.prepare(a, a.copy(order="F"), a.copy(order="F"), group_size=batch)._work.chunks)
        == chunks
    )
    assert len(launcher.default_split(batch, kernel._chunk_groups).chunks) == chunks


@pytest.mark.usefixtures("four_cores")
def test_a_launch_that_says_num_threads_is_split_as_told() -> None:
    kernel = compiled(group_members("f32", 8, 8, 8))["k"]
    a = np.zeros((8, 8, 64), np.float32, order="F")
    launch = kernel.prepare(a, a.copy(order="F"), a.copy(order="F"), group_size=64, num_threads=3)
    assert len(launch._work.chunks) == 3


@pytest.mark.usefixtures("four_cores")
def test_kernels_of_unknown_work_take_a_chunk_per_core() -> None:
    kernel = compiled(AXPBY)["k"]
    x = np.ones(4096, np.float32)
    assert len(kernel.prepare(x, x.copy(), group_size=8)._work.chunks) == 4


@pytest.mark.parametrize("batch", [5, 64, 700])
def test_launches_without_num_threads_compute_every_member(batch: int) -> None:
    kernel = compiled(group_members("f64", 8, 8, 8))["k"]
    rng = np.random.default_rng(batch)
    for _ in range(2):  # binding, then the known layouts
        check_members(kernel, "f64", (8, 8, 8), rng, batch)
