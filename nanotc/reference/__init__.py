"""A numpy evaluator of checked tensor-language programs: the oracle for differential tests of
the native backend and for `nanotc run --check`.

    from nanotc.reference import evaluate
    evaluate(program, "fused_kernel", [alpha, A, B, C, D], group_size=100)

`evaluate` runs work-groups 0..group_size-1 in order and updates the caller's numpy arrays in
place, as a native launch would. The semantics are documented in the modules:

- `interpreter`  launch, argument binding, control flow (if, for, foreach, yield)
- `scalars`      scalar values; arith, cmp, cast
- `conversions`  conversions between scalar types (cast and mixed-type collectives)
- `memory`       memrefs and groups as numpy views; subview, expand, fuse, alloca, load, store
- `replicated`   the replicated instructions
- `blas`         the collective linear-algebra instructions
- `errors`       EvaluationError, raised on undefined behaviour detected at run time
"""

from nanotc.reference.errors import EvaluationError
from nanotc.reference.interpreter import evaluate

__all__ = ["EvaluationError", "evaluate"]
