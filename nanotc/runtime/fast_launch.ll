; nanotc's native launch: a kernel launch on arrays of layouts seen before, without Python
; work per argument (see fast_launch.py).
;
; @nanotc_fast_launch(holder, args, group_size, num_threads) is called through ctypes with
; the GIL held. *holder is a record (below) of one combination of argument layouts that
; binding accepted, or null. Every argument must match it exactly: an ndarray (its type
; object, not a subclass) of the recorded dtype object, rank, shape and strides, writeable
; where the kernel writes it; the scalars within the parameter's type: integers Python ints,
; numpy int64s or int32s, reals also Python floats, numpy float64s, float32s, finite float16s,
; ml_dtypes' finite bfloat16s and integers of at most 53 bits (f16 and bf16 ones finite, and so once rounded); arrays that must not
; share memory with their byte ranges apart; group_size and num_threads integers as scalars
; are (num_threads also None).
; Then the slots are the record's with the data addresses and scalars filled in, and the
; work-groups run with the GIL released: as one chunk on this thread, or in chunks on the
; published thread pool (pool.ll's @nanotc_pool_try_run) split as launcher.py splits them;
; the kernel's return code is returned. Anything else, a pool that another launch has or that
; lacks the workers included, returns -1 having run nothing, and the caller takes the Python
; path, which checks, reports errors and waits for the pool.
;
; Object layouts (CPython with the GIL, numpy's PyArrayObject) are fast_launch.py's
; constants, checked against probe objects before this code is used:
;   any object:  ob_type at 8
;   tuple:       size at 16, items at 24
;   float:       value at 16
;   numpy float64, float32, float16, int64, int32 and ml_dtypes bfloat16 scalars: value at 16
;   ndarray:     data at 16, nd (i32) at 24, dimensions at 32, strides at 40, descr at 56,
;                flags (i32) at 64
;
; Record, i64 words:
;   0 argument count        1 slot count            2 packed entry address
;   3 most work-groups      4 fewest work-groups a thread takes without num_threads
;   5 memrefs, 6 at         7 scalars, 8 at         9 disjoint pairs, 10 at
;   11 slots' template at   12 ndarray type         13 float type
;   14 int type             15 None                 16 threads without num_threads
;   17 address of the published pool: its state, mailboxes, @nanotc_pool_try_run (0: none)
;   18-23 numpy's float64, float32, float16, int64 and int32 scalar types and ml_dtypes'
;         bfloat16 (0: their scalars read through Python)
; memref entry (6 words):   param, slot, dtype, rank, must be writeable, extents at
;                           (rank sizes, then rank strides in bytes)
; scalar entry (6 words):   param, slot, kind (0 f64, 1 f32, 2 integer, 3 f16, 4 bf16),
;                           lowest, highest, mask (an integer's slot is its two's complement,
;                           masked)
; disjoint entry (6 words): slot x, slot y, x low, x high, y low, y high (byte ranges
;                           relative to the data addresses; they must not meet)

declare ptr @PyEval_SaveThread()
declare void @PyEval_RestoreThread(ptr)
declare i64 @PyLong_AsLongLongAndOverflow(ptr, ptr)

define private i64 @word(ptr %base, i64 %index) {
  %at = getelementptr inbounds i64, ptr %base, i64 %index
  %value = load i64, ptr %at, align 8
  ret i64 %value
}

define private i64 @field(ptr %object, i64 %offset) {
  %at = getelementptr inbounds i8, ptr %object, i64 %offset
  %value = load i64, ptr %at, align 8
  ret i64 %value
}

define private ptr @item(ptr %tuple, i64 %index) {
  %offset = mul i64 %index, 8
  %skip = add i64 %offset, 24
  %at = getelementptr inbounds i8, ptr %tuple, i64 %skip
  %value = load ptr, ptr %at, align 8
  ret ptr %value
}

; The value of an integer (a Python int, or a numpy int64 or int32), and whether it is one
; that fits 64 bits. Only a Python int is read through the Python API, which runs no Python
; code for one.
define private { i64, i1 } @integer_value(ptr %record, ptr %object) {
entry:
  %overflow = alloca i32, align 4
  %type = call i64 @field(ptr %object, i64 8)
  %int_type = call i64 @word(ptr %record, i64 14)
  %is_int = icmp eq i64 %type, %int_type
  br i1 %is_int, label %python, label %not_python
python:
  %value = call i64 @PyLong_AsLongLongAndOverflow(ptr %object, ptr %overflow)
  %flag = load i32, ptr %overflow, align 4
  %fits = icmp eq i32 %flag, 0
  %partial = insertvalue { i64, i1 } undef, i64 %value, 0
  %result = insertvalue { i64, i1 } %partial, i1 %fits, 1
  ret { i64, i1 } %result
not_python:
  %int64_type = call i64 @word(ptr %record, i64 21)
  %is_int64 = icmp eq i64 %type, %int64_type
  br i1 %is_int64, label %int64, label %not_int64
int64:
  %value64 = call i64 @field(ptr %object, i64 16)
  %result64 = insertvalue { i64, i1 } { i64 0, i1 true }, i64 %value64, 0
  ret { i64, i1 } %result64
not_int64:
  %int32_type = call i64 @word(ptr %record, i64 22)
  %is_int32 = icmp eq i64 %type, %int32_type
  br i1 %is_int32, label %int32, label %no
int32:
  %at32 = getelementptr inbounds i8, ptr %object, i64 16
  %value32 = load i32, ptr %at32, align 4
  %widened32 = sext i32 %value32 to i64
  %result32 = insertvalue { i64, i1 } { i64 0, i1 true }, i64 %widened32, 0
  ret { i64, i1 } %result32
no:
  ret { i64, i1 } { i64 0, i1 false }
}

; The bits of a real number as a double (a Python float, a numpy float64, float32 or finite
; float16, a finite bfloat16, or an integer of at most 53 bits, which a double holds exactly),
; and whether it is one.
define private { i64, i1 } @real_value(ptr %record, ptr %object) {
entry:
  %type = call i64 @field(ptr %object, i64 8)
  %float_type = call i64 @word(ptr %record, i64 13)
  %float64_type = call i64 @word(ptr %record, i64 18)
  %float32_type = call i64 @word(ptr %record, i64 19)
  %float16_type = call i64 @word(ptr %record, i64 20)
  %bfloat16_type = call i64 @word(ptr %record, i64 23)
  %is_float = icmp eq i64 %type, %float_type
  %is_float64 = icmp eq i64 %type, %float64_type
  %is_double = or i1 %is_float, %is_float64
  br i1 %is_double, label %double, label %not_double
double:
  %bits = call i64 @field(ptr %object, i64 16)
  %result = insertvalue { i64, i1 } { i64 0, i1 true }, i64 %bits, 0
  ret { i64, i1 } %result
not_double:
  %at = getelementptr inbounds i8, ptr %object, i64 16
  %is_float32 = icmp eq i64 %type, %float32_type
  br i1 %is_float32, label %single, label %not_single
single:
  %value32 = load float, ptr %at, align 4
  %widened32 = fpext float %value32 to double
  %bits32 = bitcast double %widened32 to i64
  %result32 = insertvalue { i64, i1 } { i64 0, i1 true }, i64 %bits32, 0
  ret { i64, i1 } %result32
not_single:
  %is_float16 = icmp eq i64 %type, %float16_type
  br i1 %is_float16, label %half, label %not_half
half:
  %half_bits = load i16, ptr %at, align 2
  %from_half = call { i64, i1 } @half_value(i16 %half_bits)
  ret { i64, i1 } %from_half
not_half:
  %is_bfloat16 = icmp eq i64 %type, %bfloat16_type
  br i1 %is_bfloat16, label %brain, label %integer
brain:
  ; a bfloat16 is the high half of an f32
  %brain_bits = load i16, ptr %at, align 2
  %brain_wide = zext i16 %brain_bits to i32
  %brain_high = shl i32 %brain_wide, 16
  %brain_single = bitcast i32 %brain_high to float
  %brain_double = fpext float %brain_single to double
  %brain_abs = call double @llvm.fabs.f64(double %brain_double)
  %brain_finite = fcmp one double %brain_abs, 0x7FF0000000000000
  %brain_as_bits = bitcast double %brain_double to i64
  %brain_partial = insertvalue { i64, i1 } undef, i64 %brain_as_bits, 0
  %brain_result = insertvalue { i64, i1 } %brain_partial, i1 %brain_finite, 1
  ret { i64, i1 } %brain_result
integer:
  %int = call { i64, i1 } @integer_value(ptr %record, ptr %object)
  %n = extractvalue { i64, i1 } %int, 0
  %is_integer = extractvalue { i64, i1 } %int, 1
  ; within 2^53 a double is exact, and rounding it once more rounds as binding does
  %shifted = add i64 %n, 9007199254740992
  %exact = icmp ule i64 %shifted, 18014398509481984
  %ok = and i1 %is_integer, %exact
  %as_double = sitofp i64 %n to double
  %bits_int = bitcast double %as_double to i64
  %partial_int = insertvalue { i64, i1 } undef, i64 %bits_int, 0
  %result_int = insertvalue { i64, i1 } %partial_int, i1 %ok, 1
  ret { i64, i1 } %result_int
}

; A finite f16's value as a double's bits, exactly: its significand (with the leading bit of
; a normal half) times a power of two; an infinity or NaN is refused. In integer and double
; arithmetic, so the code needs no f16 instructions.
define private { i64, i1 } @half_value(i16 %bits) {
  %wide = zext i16 %bits to i64
  %fraction = and i64 %wide, 1023
  %shifted = lshr i64 %wide, 10
  %exponent = and i64 %shifted, 31
  %negative = icmp ugt i64 %wide, 32767
  %normal = icmp ne i64 %exponent, 0
  %finite = icmp ne i64 %exponent, 31
  %with_lead = or i64 %fraction, 1024
  %significand = select i1 %normal, i64 %with_lead, i64 %fraction
  %scale_exponent = select i1 %normal, i64 %exponent, i64 1
  ; 2^(exponent - 25): the double exponent field exponent - 25 + 1023
  %biased = add i64 %scale_exponent, 998
  %scale_bits = shl i64 %biased, 52
  %scale = bitcast i64 %scale_bits to double
  %magnitude_int = sitofp i64 %significand to double
  %magnitude = fmul double %magnitude_int, %scale
  %negated = fneg double %magnitude
  %value = select i1 %negative, double %negated, double %magnitude
  %value_bits = bitcast double %value to i64
  %partial = insertvalue { i64, i1 } undef, i64 %value_bits, 0
  %result = insertvalue { i64, i1 } %partial, i1 %finite, 1
  ret { i64, i1 } %result
}

; The chunks of a launch of %groups work-groups (launcher.py's default_split and split), or
; -1 where `num_threads` is neither None nor an integer from 1 to launcher.MAX_THREADS (1024).
define private i64 @chunk_count(ptr %record, ptr %threads, i64 %groups) {
entry:
  %none = call i64 @word(ptr %record, i64 15)
  %threads_at = ptrtoint ptr %threads to i64
  %default = icmp eq i64 %threads_at, %none
  br i1 %default, label %by_default, label %given
by_default:
  %fewest = call i64 @word(ptr %record, i64 4)
  %cores = call i64 @word(ptr %record, i64 16)
  %worth = udiv i64 %groups, %fewest
  %fewer = icmp ult i64 %worth, %cores
  %capped = select i1 %fewer, i64 %worth, i64 %cores
  br label %parts
given:
  %count = call { i64, i1 } @integer_value(ptr %record, ptr %threads)
  %value = extractvalue { i64, i1 } %count, 0
  %fits = extractvalue { i64, i1 } %count, 1
  %positive = icmp sge i64 %value, 1
  %at_most = icmp sle i64 %value, 1024
  %in_range = and i1 %positive, %at_most
  %ok = and i1 %fits, %in_range
  br i1 %ok, label %parts, label %refused
parts:
  %wanted = phi i64 [ %capped, %by_default ], [ %value, %given ]
  %more_than_groups = icmp ugt i64 %wanted, %groups
  %at_most_groups = select i1 %more_than_groups, i64 %groups, i64 %wanted
  %none_left = icmp eq i64 %at_most_groups, 0
  %chunks = select i1 %none_left, i64 1, i64 %at_most_groups
  ret i64 %chunks
refused:
  ret i64 -1
}

; Whether the ndarray %array has the layout of memref entry %described; its data address if so.
define private { i64, i1 } @matching_array(ptr %record, ptr %described, ptr %array) {
entry:
  %ndarray = call i64 @word(ptr %record, i64 12)
  %type = call i64 @field(ptr %array, i64 8)
  %is_ndarray = icmp eq i64 %type, %ndarray
  br i1 %is_ndarray, label %dtype, label %no
dtype:
  %want_dtype = call i64 @word(ptr %described, i64 2)
  %descr = call i64 @field(ptr %array, i64 56)
  %same_dtype = icmp eq i64 %descr, %want_dtype
  %rank = call i64 @word(ptr %described, i64 3)
  %nd_at = getelementptr inbounds i8, ptr %array, i64 24
  %nd32 = load i32, ptr %nd_at, align 4
  %nd = sext i32 %nd32 to i64
  %same_rank = icmp eq i64 %nd, %rank
  %same = and i1 %same_dtype, %same_rank
  br i1 %same, label %flags, label %no
flags:
  %writeable = call i64 @word(ptr %described, i64 4)
  %flags_at = getelementptr inbounds i8, ptr %array, i64 64
  %flags32 = load i32, ptr %flags_at, align 4
  %writeable_bit = and i32 %flags32, 1024
  %is_writeable = icmp ne i32 %writeable_bit, 0
  %need = icmp ne i64 %writeable, 0
  %refused = xor i1 %is_writeable, true
  %bad = and i1 %need, %refused
  br i1 %bad, label %no, label %extents
extents:
  %extents_at = call i64 @word(ptr %described, i64 5)
  %want = getelementptr inbounds i64, ptr %record, i64 %extents_at
  %shape_word = call i64 @field(ptr %array, i64 32)
  %shape = inttoptr i64 %shape_word to ptr
  %strides_word = call i64 @field(ptr %array, i64 40)
  %strides = inttoptr i64 %strides_word to ptr
  br label %mode
mode:
  %i = phi i64 [ 0, %extents ], [ %next, %same_mode ]
  %more = icmp slt i64 %i, %rank
  br i1 %more, label %compare, label %yes
compare:
  %size = call i64 @word(ptr %shape, i64 %i)
  %want_size = call i64 @word(ptr %want, i64 %i)
  %stride = call i64 @word(ptr %strides, i64 %i)
  %stride_index = add i64 %i, %rank
  %want_stride = call i64 @word(ptr %want, i64 %stride_index)
  %size_ok = icmp eq i64 %size, %want_size
  %stride_ok = icmp eq i64 %stride, %want_stride
  %mode_ok = and i1 %size_ok, %stride_ok
  %next = add i64 %i, 1
  br i1 %mode_ok, label %same_mode, label %no
same_mode:
  br label %mode
yes:
  %data = call i64 @field(ptr %array, i64 16)
  %partial = insertvalue { i64, i1 } undef, i64 %data, 0
  %result = insertvalue { i64, i1 } %partial, i1 true, 1
  ret { i64, i1 } %result
no:
  ret { i64, i1 } { i64 0, i1 false }
}

; The slot bits of scalar entry %described's argument %value, and whether it is accepted.
define private { i64, i1 } @scalar_bits(ptr %record, ptr %described, ptr %value) {
entry:
  %kind = call i64 @word(ptr %described, i64 2)
  %is_integer = icmp eq i64 %kind, 2
  br i1 %is_integer, label %integer, label %real
integer:
  %int = call { i64, i1 } @integer_value(ptr %record, ptr %value)
  %n = extractvalue { i64, i1 } %int, 0
  %fits = extractvalue { i64, i1 } %int, 1
  %lowest = call i64 @word(ptr %described, i64 3)
  %highest = call i64 @word(ptr %described, i64 4)
  %mask = call i64 @word(ptr %described, i64 5)
  %above = icmp sge i64 %n, %lowest
  %below = icmp sle i64 %n, %highest
  %within = and i1 %above, %below
  %int_ok = and i1 %fits, %within
  %masked = and i64 %n, %mask
  %int_partial = insertvalue { i64, i1 } undef, i64 %masked, 0
  %int_result = insertvalue { i64, i1 } %int_partial, i1 %int_ok, 1
  ret { i64, i1 } %int_result
real:
  %number = call { i64, i1 } @real_value(ptr %record, ptr %value)
  %is_real = extractvalue { i64, i1 } %number, 1
  br i1 %is_real, label %read, label %no
read:
  %bits64 = extractvalue { i64, i1 } %number, 0
  switch i64 %kind, label %f32 [ i64 0, label %f64
                                 i64 3, label %f16
                                 i64 4, label %bf16 ]
f16:
  %half = call { i64, i1 } @to_f16(i64 %bits64)
  ret { i64, i1 } %half
bf16:
  %brain = call { i64, i1 } @to_bf16(i64 %bits64)
  ret { i64, i1 } %brain
f64:
  %f64_partial = insertvalue { i64, i1 } undef, i64 %bits64, 0
  %f64_result = insertvalue { i64, i1 } %f64_partial, i1 true, 1
  ret { i64, i1 } %f64_result
f32:
  ; the C conversion, as binding's; a finite value that rounds to an infinity is refused
  %double = bitcast i64 %bits64 to double
  %single = fptrunc double %double to float
  %single_abs = call float @llvm.fabs.f32(float %single)
  %double_abs = call double @llvm.fabs.f64(double %double)
  %single_inf = fcmp oeq float %single_abs, 0x7FF0000000000000
  %double_inf = fcmp oeq double %double_abs, 0x7FF0000000000000
  %double_finite = xor i1 %double_inf, true
  %overflowed = and i1 %single_inf, %double_finite
  %f32_ok = xor i1 %overflowed, true
  %bits32 = bitcast float %single to i32
  %bits = zext i32 %bits32 to i64
  %f32_partial = insertvalue { i64, i1 } undef, i64 %bits, 0
  %f32_result = insertvalue { i64, i1 } %f32_partial, i1 %f32_ok, 1
  ret { i64, i1 } %f32_result
no:
  ret { i64, i1 } { i64 0, i1 false }
}

declare float @llvm.fabs.f32(float)
declare double @llvm.fabs.f64(double)

; A finite double's bits rounded to the nearest f16 (ties to even), as numpy's float16 rounds
; a Python float; refused where it is not finite or rounds to an infinity (binding reports
; those). Normal and subnormal halves alike: the significand with its leading bit (none for
; a subnormal double, which rounds to zero) shifted right by 42 bits, more below f16's
; normal range, the exponent added above the leading bit.
define private { i64, i1 } @to_f16(i64 %bits) {
entry:
  %sign = lshr i64 %bits, 48
  %sign16 = and i64 %sign, 32768
  %exp = call i64 @exponent_of(i64 %bits)
  %finite = icmp ult i64 %exp, 2047
  %fraction = and i64 %bits, 4503599627370495
  %nonzero_exp = icmp ne i64 %exp, 0
  %lead = select i1 %nonzero_exp, i64 4503599627370496, i64 0
  %significand = or i64 %fraction, %lead
  %normal = icmp uge i64 %exp, 1009
  %below = sub i64 1051, %exp
  %below_capped = call i64 @llvm.umin.i64(i64 %below, i64 63)
  %shift = select i1 %normal, i64 42, i64 %below_capped
  %scaled = sub i64 %exp, 1009
  %above = shl i64 %scaled, 10
  %base = select i1 %normal, i64 %above, i64 0
  %kept = call i64 @round_right(i64 %significand, i64 %shift)
  %magnitude = add i64 %base, %kept
  %in_range = icmp ult i64 %magnitude, 31744
  %ok = and i1 %finite, %in_range
  %half = or i64 %sign16, %magnitude
  %partial = insertvalue { i64, i1 } undef, i64 %half, 0
  %result = insertvalue { i64, i1 } %partial, i1 %ok, 1
  ret { i64, i1 } %result
}

; A finite double's bits as a bfloat16, rounded once to nearest, ties to even, as the
; language's f64 -> bf16 cast rounds: to f32 by rounding to odd (toward zero, the last bit set
; where inexact), which keeps the second rounding, to bf16's 8 significand bits, exact; refused
; where it is not finite or rounds to an infinity.
define private { i64, i1 } @to_bf16(i64 %bits) {
entry:
  %exp = call i64 @exponent_of(i64 %bits)
  %finite = icmp ult i64 %exp, 2047
  %double = bitcast i64 %bits to double
  %single = fptrunc double %double to float
  %bits32 = bitcast float %single to i32
  %wide = zext i32 %bits32 to i64
  %sign = and i64 %wide, 2147483648
  %nearest32 = and i64 %wide, 2147483647
  %back = fpext float %single to double
  %inexact = fcmp one double %back, %double
  %magnitude = call double @llvm.fabs.f64(double %double)
  %back_magnitude = call double @llvm.fabs.f64(double %back)
  %rounded_up = fcmp ogt double %back_magnitude, %magnitude
  %step_back = and i1 %inexact, %rounded_up
  %down = zext i1 %step_back to i64
  %toward_zero = sub i64 %nearest32, %down
  %sticky = zext i1 %inexact to i64
  %magnitude32 = or i64 %toward_zero, %sticky
  %kept = call i64 @round_right(i64 %magnitude32, i64 16)
  %in_range = icmp ult i64 %kept, 32640
  %ok = and i1 %finite, %in_range
  %sign16 = lshr i64 %sign, 16
  %brain = or i64 %sign16, %kept
  %partial = insertvalue { i64, i1 } undef, i64 %brain, 0
  %result = insertvalue { i64, i1 } %partial, i1 %ok, 1
  ret { i64, i1 } %result
}

define private i64 @exponent_of(i64 %bits) {
  %high = lshr i64 %bits, 52
  %exp = and i64 %high, 2047
  ret i64 %exp
}

; %x >> %shift (1 to 63) rounded to nearest, ties to even.
define private i64 @round_right(i64 %x, i64 %shift) {
  %q = lshr i64 %x, %shift
  %unit = shl i64 1, %shift
  %below = sub i64 %unit, 1
  %r = and i64 %x, %below
  %half_shift = sub i64 %shift, 1
  %half = shl i64 1, %half_shift
  %past = icmp ugt i64 %r, %half
  %tie = icmp eq i64 %r, %half
  %odd = trunc i64 %q to i1
  %tie_up = and i1 %tie, %odd
  %up = or i1 %past, %tie_up
  %step = zext i1 %up to i64
  %rounded = add i64 %q, %step
  ret i64 %rounded
}

declare i64 @llvm.umin.i64(i64, i64)

; Fills the memrefs' data addresses into %slots; false if an array does not match.
define private i1 @fill_memrefs(ptr %record, ptr %args, ptr %slots) {
entry:
  %count = call i64 @word(ptr %record, i64 5)
  %first = call i64 @word(ptr %record, i64 6)
  br label %loop
loop:
  %i = phi i64 [ 0, %entry ], [ %next, %matched ]
  %more = icmp slt i64 %i, %count
  br i1 %more, label %check, label %done
check:
  %offset = mul i64 %i, 6
  %index = add i64 %first, %offset
  %entry_at = getelementptr inbounds i64, ptr %record, i64 %index
  %param = call i64 @word(ptr %entry_at, i64 0)
  %array = call ptr @item(ptr %args, i64 %param)
  %data = call { i64, i1 } @matching_array(ptr %record, ptr %entry_at, ptr %array)
  %ok = extractvalue { i64, i1 } %data, 1
  %next = add i64 %i, 1
  br i1 %ok, label %matched, label %refused
matched:
  %slot = call i64 @word(ptr %entry_at, i64 1)
  %slot_at = getelementptr inbounds i64, ptr %slots, i64 %slot
  %address = extractvalue { i64, i1 } %data, 0
  store i64 %address, ptr %slot_at, align 8
  br label %loop
done:
  ret i1 true
refused:
  ret i1 false
}

; Fills the scalars' bits into %slots; false if one is not a plain number of its type.
define private i1 @fill_scalars(ptr %record, ptr %args, ptr %slots) {
entry:
  %count = call i64 @word(ptr %record, i64 7)
  %first = call i64 @word(ptr %record, i64 8)
  br label %loop
loop:
  %i = phi i64 [ 0, %entry ], [ %next, %accepted ]
  %more = icmp slt i64 %i, %count
  br i1 %more, label %check, label %done
check:
  %offset = mul i64 %i, 6
  %index = add i64 %first, %offset
  %entry_at = getelementptr inbounds i64, ptr %record, i64 %index
  %param = call i64 @word(ptr %entry_at, i64 0)
  %value = call ptr @item(ptr %args, i64 %param)
  %bits = call { i64, i1 } @scalar_bits(ptr %record, ptr %entry_at, ptr %value)
  %ok = extractvalue { i64, i1 } %bits, 1
  %next = add i64 %i, 1
  br i1 %ok, label %accepted, label %refused
accepted:
  %slot = call i64 @word(ptr %entry_at, i64 1)
  %slot_at = getelementptr inbounds i64, ptr %slots, i64 %slot
  %word = extractvalue { i64, i1 } %bits, 0
  store i64 %word, ptr %slot_at, align 8
  br label %loop
done:
  ret i1 true
refused:
  ret i1 false
}

; Whether every pair of arrays that must not share memory has byte ranges apart.
define private i1 @apart(ptr %record, ptr %slots) {
entry:
  %count = call i64 @word(ptr %record, i64 9)
  %first = call i64 @word(ptr %record, i64 10)
  br label %loop
loop:
  %i = phi i64 [ 0, %entry ], [ %next, %check ]
  %more = icmp slt i64 %i, %count
  br i1 %more, label %check, label %done
check:
  %offset = mul i64 %i, 6
  %index = add i64 %first, %offset
  %pair = getelementptr inbounds i64, ptr %record, i64 %index
  %x_slot = call i64 @word(ptr %pair, i64 0)
  %y_slot = call i64 @word(ptr %pair, i64 1)
  %x = call i64 @word(ptr %slots, i64 %x_slot)
  %y = call i64 @word(ptr %slots, i64 %y_slot)
  %x_low = call i64 @word(ptr %pair, i64 2)
  %x_high = call i64 @word(ptr %pair, i64 3)
  %y_low = call i64 @word(ptr %pair, i64 4)
  %y_high = call i64 @word(ptr %pair, i64 5)
  %x_start = add i64 %x, %x_low
  %x_end = add i64 %x, %x_high
  %y_start = add i64 %y, %y_low
  %y_end = add i64 %y, %y_high
  %x_before_y_ends = icmp slt i64 %x_start, %y_end
  %y_before_x_ends = icmp slt i64 %y_start, %x_end
  %meet = and i1 %x_before_y_ends, %y_before_x_ends
  %next = add i64 %i, 1
  br i1 %meet, label %refused, label %loop
done:
  ret i1 true
refused:
  ret i1 false
}

define i32 @nanotc_fast_launch(ptr %holder, ptr %args, ptr %groups_object, ptr %threads) {
entry:
  %record = load ptr, ptr %holder, align 8
  %known = icmp ne ptr %record, null
  br i1 %known, label %count, label %decline
count:
  %arguments = call i64 @word(ptr %record, i64 0)
  %given = call i64 @field(ptr %args, i64 16)
  %same_count = icmp eq i64 %given, %arguments
  br i1 %same_count, label %groups, label %decline
groups:
  %group_int = call { i64, i1 } @integer_value(ptr %record, ptr %groups_object)
  %group_size = extractvalue { i64, i1 } %group_int, 0
  %group_fits = extractvalue { i64, i1 } %group_int, 1
  %most = call i64 @word(ptr %record, i64 3)
  %not_negative = icmp sge i64 %group_size, 0
  %not_too_many = icmp sle i64 %group_size, %most
  %in_range = and i1 %not_negative, %not_too_many
  %group_ok = and i1 %group_fits, %in_range
  br i1 %group_ok, label %split_groups, label %decline
split_groups:
  %chunks = call i64 @chunk_count(ptr %record, ptr %threads, i64 %group_size)
  %threads_ok = icmp sgt i64 %chunks, 0
  br i1 %threads_ok, label %slots, label %decline
slots:
  %slot_count = call i64 @word(ptr %record, i64 1)
  %slot_memory = alloca i64, i64 %slot_count, align 16
  %template_at = call i64 @word(ptr %record, i64 11)
  %template = getelementptr inbounds i64, ptr %record, i64 %template_at
  %slot_bytes = mul i64 %slot_count, 8
  call void @llvm.memcpy.p0.p0.i64(ptr align 8 %slot_memory, ptr align 8 %template, i64 %slot_bytes, i1 false)
  %memrefs_ok = call i1 @fill_memrefs(ptr %record, ptr %args, ptr %slot_memory)
  br i1 %memrefs_ok, label %scalars, label %decline
scalars:
  %scalars_ok = call i1 @fill_scalars(ptr %record, ptr %args, ptr %slot_memory)
  br i1 %scalars_ok, label %overlap, label %decline
overlap:
  %apart = call i1 @apart(ptr %record, ptr %slot_memory)
  %entry_word = call i64 @word(ptr %record, i64 2)
  %kernel = inttoptr i64 %entry_word to ptr
  %one_chunk = icmp eq i64 %chunks, 1
  br i1 %apart, label %split, label %decline
split:
  br i1 %one_chunk, label %run_here, label %pool
run_here:
  %state = call ptr @PyEval_SaveThread()
  %code = call i32 %kernel(ptr %slot_memory, i64 0, i64 %group_size, i64 %group_size)
  call void @PyEval_RestoreThread(ptr %state)
  ret i32 %code
pool:
  %pool_code = call i32 @run_on_pool(ptr %record, ptr %kernel, ptr %slot_memory, i64 %chunks, i64 %group_size)
  ret i32 %pool_code
decline:
  ret i32 -1
}

; Work-groups 0..%groups-1 in %chunks chunks on the published pool, with the GIL released:
; the kernel's code, or -1 having run nothing (no pool, or one busy or too small; so many
; chunks or work-groups that their bounds are better left to Python).
define private i32 @run_on_pool(ptr %record, ptr %kernel, ptr %slots, i64 %chunks, i64 %groups) {
entry:
  %published_word = call i64 @word(ptr %record, i64 17)
  %published = inttoptr i64 %published_word to ptr
  %state_word = call i64 @word(ptr %published, i64 0)
  %has_pool = icmp ne i64 %state_word, 0
  %few_chunks = icmp ule i64 %chunks, 256
  %few_groups = icmp ult i64 %groups, 4294967296
  %small = and i1 %few_chunks, %few_groups
  %possible = and i1 %has_pool, %small
  br i1 %possible, label %bounds, label %refused
bounds:
  %bound_count = mul i64 %chunks, 2
  %bounds_memory = alloca i64, i64 %bound_count, align 16
  br label %bound
bound:
  %c = phi i64 [ 0, %bounds ], [ %c_next, %bound ]
  %c_next = add i64 %c, 1
  %begin_scaled = mul i64 %groups, %c
  %begin = udiv i64 %begin_scaled, %chunks
  %end_scaled = mul i64 %groups, %c_next
  %end = udiv i64 %end_scaled, %chunks
  %begin_index = mul i64 %c, 2
  %end_index = add i64 %begin_index, 1
  %begin_at = getelementptr inbounds i64, ptr %bounds_memory, i64 %begin_index
  %end_at = getelementptr inbounds i64, ptr %bounds_memory, i64 %end_index
  store i64 %begin, ptr %begin_at, align 8
  store i64 %end, ptr %end_at, align 8
  %more = icmp ult i64 %c_next, %chunks
  br i1 %more, label %bound, label %run
run:
  %state = inttoptr i64 %state_word to ptr
  %boxes_word = call i64 @word(ptr %published, i64 1)
  %boxes = inttoptr i64 %boxes_word to ptr
  %try_run_word = call i64 @word(ptr %published, i64 2)
  %try_run = inttoptr i64 %try_run_word to ptr
  %thread = call ptr @PyEval_SaveThread()
  %code = call i32 %try_run(ptr %state, ptr %boxes, ptr %kernel, ptr %slots, ptr %bounds_memory,
                            i64 %chunks, i64 %groups)
  call void @PyEval_RestoreThread(ptr %thread)
  ret i32 %code
refused:
  ret i32 -1
}

declare void @llvm.memcpy.p0.p0.i64(ptr, ptr, i64, i1)
