"""torch CPU tensors wherever numpy arrays are accepted, without copies: kernels write into the
tensors themselves (memrefs, groups as one batched tensor or a list, 0-d tensors as scalars,
strided views, recipes). Skipped when torch is not installed."""

from __future__ import annotations

import pytest

import nanotc
from nanotc import recipes
from nanotc.ir.types import GroupType, MemRefType, ScalarType
from nanotc.runtime.arguments import ArgumentError, bind_group, bind_memref

torch = pytest.importorskip("torch")

GEMM = """func @gemm(%alpha: f32, %A: memref<f32x?x?,strided<1,?>>, %B: memref<f32x?x?,strided<1,?>>,
                  %C: memref<f32x?x?,strided<1,?>>) {
    gemm.n.n %alpha, %A, %B, 0.0, %C : f32, memref<f32x?x?,strided<1,?>>, memref<f32x?x?,strided<1,?>>, f32, memref<f32x?x?,strided<1,?>>
}
"""

BATCHED = """func @bgemm(%A: group<memref<f64x4x4>>, %B: memref<f64x4x4>, %C: memref<f64x4x4x?>) {
    %g = group_id
    %a = load %A[%g] : group<memref<f64x4x4>>
    %c = subview %C[:, :, %g] : memref<f64x4x4x?>
    gemm.n.n 1.0, %a, %B, 0.0, %c : f64, memref<f64x4x4>, memref<f64x4x4>, f64, memref<f64x4x4>
}
"""

COPY = """func @copy(%x: memref<{t}x?>, %y: memref<{t}x?>) {{
    %g = group_id
    %v = load %x[%g] : memref<{t}x?>
    store %v, %y[%g] : memref<{t}x?>
}}
"""


def column_major(rows: int, cols: int, dtype=torch.float32):  # type: ignore[no-untyped-def]
    """A rows x cols tensor with unit stride down columns (the language's default layout)."""
    return torch.randn(cols, rows, dtype=dtype).t()


def test_gemm_writes_into_column_major_tensors() -> None:
    a, b = column_major(7, 5), column_major(5, 3)
    c = column_major(9, 3)[1:8]  # a strided view: leading dimension 9
    kernel = nanotc.compile(GEMM)["gemm"]
    kernel(torch.tensor(2.0), a, b, c, group_size=1)  # a 0-d tensor as the scalar alpha
    torch.testing.assert_close(c, 2.0 * a @ b, rtol=1e-5, atol=1e-5)


def test_groups_from_a_batched_tensor_and_from_a_list() -> None:
    kernel = nanotc.compile(BATCHED)["bgemm"]
    members = [column_major(4, 4, torch.float64) for _ in range(3)]
    b = column_major(4, 4, torch.float64)
    c = torch.zeros(3, 4, 4, dtype=torch.float64).permute(2, 1, 0)  # 4 x 4 x 3, column-major
    kernel(members, b, c, group_size=3)
    for g in range(3):
        torch.testing.assert_close(c[:, :, g], members[g] @ b)
    stacked = torch.stack([m.t() for m in members]).permute(2, 1, 0)  # one tensor, last axis g
    c.zero_()
    kernel(stacked, b, c, group_size=3)
    for g in range(3):
        torch.testing.assert_close(c[:, :, g], members[g] @ b)


@pytest.mark.parametrize(
    ("language", "dtype"),
    [("f16", torch.float16), ("i8", torch.int8), ("i64", torch.int64), ("i1", torch.bool)],
)
def test_other_element_types_share_memory(language: str, dtype) -> None:  # type: ignore[no-untyped-def]
    x = (torch.arange(6) % 2 == 1) if dtype is torch.bool else torch.arange(6).to(dtype)
    y = torch.zeros(6, dtype=dtype)
    nanotc.compile(COPY.format(t=language))["copy"](x, y, group_size=6)
    assert torch.equal(x, y)


def test_views_are_not_copies_bfloat16_included() -> None:
    for dtype, element in ((torch.bfloat16, ScalarType.BF16), (torch.float32, ScalarType.F32)):
        t = column_major(4, 6, dtype)[:, 1:5]
        view = bind_memref("t", MemRefType(element, (4, 4), (1, 4)), t)
        assert view.address == t.data_ptr() and view.strides == (1, 4)
    batch = torch.zeros(2, 4, 4).permute(2, 1, 0)
    group = bind_group("g", GroupType(MemRefType(ScalarType.F32, (4, 4), (1, 4)), 0), batch)
    assert int(group.addresses[1]) == batch.data_ptr() + 16 * 4


def test_tensors_that_cannot_be_shared_are_clear_errors() -> None:
    kernel = nanotc.compile(GEMM)["gemm"]
    a = column_major(2, 2).requires_grad_()
    with pytest.raises(ArgumentError, match=r"%A: expected an array in CPU memory .*detach"):
        kernel(1.0, a, column_major(2, 2), column_major(2, 2), group_size=1)


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda t: t.to_sparse(), r"layout torch\.sparse_coo: .*tensor\.to_dense\(\)"),
        (lambda t: t.reshape(2, 2).to_sparse_csr(), r"layout torch\.sparse_csr"),
        (lambda t: t.float().to_mkldnn(), r"layout torch\._mkldnn"),
        (lambda t: torch.nested.nested_tensor([t]), r"a nested tensor"),
    ],
    ids=["sparse", "sparse csr", "mkldnn", "nested"],
)
@pytest.mark.filterwarnings("ignore::UserWarning")  # torch's: csr and nested are in beta
def test_tensors_that_are_not_strided_are_clear_errors(make, message: str) -> None:  # type: ignore[no-untyped-def]
    """Not even their bfloat16 bits can be viewed (the view that reads them failed inside
    torch)."""
    kernel = nanotc.compile(COPY.format(t="bf16"))["copy"]
    y = torch.zeros(4, dtype=torch.bfloat16)
    for x in (make(torch.ones(4, dtype=torch.bfloat16)), make(torch.ones(4))):
        with pytest.raises(ArgumentError, match=r"argument %x: expected an array in CPU memory"):
            kernel(x, y, group_size=4)
    with pytest.raises(ArgumentError, match=message):
        kernel(make(torch.ones(4, dtype=torch.bfloat16)), y, group_size=4)
    assert not y.any()


def test_tensors_whose_memory_holds_other_values_are_refused() -> None:
    """A lazy negation's memory holds the negated values: reading it would flip signs."""
    kernel = nanotc.compile(GEMM)["gemm"]
    negated = torch.complex(column_major(2, 2), column_major(2, 2)).conj().imag
    assert negated.is_neg()
    with pytest.raises(ArgumentError, match=r"%A: .*lazy negation.*resolve_neg\(\)"):
        kernel(1.0, negated, column_major(2, 2), column_major(2, 2), group_size=1)
    c = torch.zeros(2, 2).t()
    kernel(1.0, negated.resolve_neg(), torch.eye(2).t(), c, group_size=1)
    torch.testing.assert_close(c, negated)


def test_an_expanded_tensor_is_refused_as_an_output() -> None:
    kernel = nanotc.compile(GEMM)["gemm"]
    c = torch.zeros(3, 1).expand(3, 2)
    with pytest.raises(ArgumentError, match=r"%C: expected an array of distinct elements"):
        kernel(1.0, column_major(3, 2), column_major(2, 2), c, group_size=1)
    assert not c.any()


def test_tuning_copies_tensors_and_leaves_them_alone() -> None:
    from nanotc.tuning.tuner import tune

    a, b, c = column_major(20, 30), column_major(30, 40), torch.zeros(40, 20).t()
    before = [a.clone(), b.clone()]
    tune(GEMM, "gemm", [1.0, a, b, c], 1, budget=0.5, tiles=1, repeats=1, store=False,
         progress=lambda _: None)  # fmt: skip
    assert not c.any()
    assert torch.equal(a, before[0]) and torch.equal(b, before[1])


def test_recipes_take_tensors() -> None:
    tas = recipes.tall_and_skinny("f32", 4, 8, M_block_size=32)
    a, b, c = column_major(100, 8), column_major(8, 4), column_major(100, 4)
    want = 0.5 * a @ b + c
    tas(0.5, a, b, 1.0, c)
    torch.testing.assert_close(c, want, rtol=1e-5, atol=1e-5)
    gemm = recipes.small_gemm_batched("f64", "n", "n", 3, 3, 3, 3, 9, 3, 9, 3, 9)
    flat = [torch.rand(27, dtype=torch.float64) for _ in range(3)]
    gemm(1.0, flat[0], flat[1], 0.0, flat[2], 3)
    for g in range(3):
        a_g, b_g = (f[9 * g : 9 * g + 9].reshape(3, 3).t() for f in flat[:2])
        torch.testing.assert_close(flat[2][9 * g : 9 * g + 9].reshape(3, 3).t(), a_g @ b_g)


def test_recipes_name_the_tensor_they_cannot_share() -> None:
    gemm = recipes.small_gemm_batched(torch.float32, "n", "n", 4, 4, 4, 4, 16, 4, 16, 4, 16)
    b, c = torch.ones(48), torch.zeros(48)
    with pytest.raises(ValueError, match=r"^A: a tensor that requires grad"):
        gemm(1.0, torch.ones(48, requires_grad=True), b, 0.0, c, 3)
    with pytest.raises(ValueError, match=r"^B: a tensor on device meta"):
        gemm(1.0, b, torch.ones(48, device="meta"), 0.0, c, 3)


def test_a_launch_disabled_for_torch_compile_runs_between_its_graphs() -> None:
    """As docs/calling-convention.md says: `torch.compiler.disable(kernel)` in the compiled
    function (TorchDynamo cannot trace the launch itself: its tensors are fake)."""
    launch = torch.compiler.disable(nanotc.compile(COPY.format(t="f32"))["copy"])

    def double_then_copy(x: torch.Tensor) -> torch.Tensor:
        y = x * 2
        out = torch.empty_like(y)
        launch(y, out, group_size=y.numel())
        return out + 1

    compiled = torch.compile(double_then_copy, backend="eager")
    x = torch.arange(6, dtype=torch.float32)
    assert compiled(x).tolist() == (x * 2 + 1).tolist()
