; nanotc's native thread pool: the workers of a multi-threaded launch (see pool.py).
;
; One caller at a time (pool.py holds a lock around @nanotc_pool_run) hands chunks of
; work-groups to worker threads through one mailbox per worker, then runs the last chunk
; itself and waits for the others. A worker spins on its mailbox for a short while after each
; chunk, so launches that follow each other closely start without an operating-system wakeup;
; then it sleeps on the pool's condition variable.
;
; Protocol:
;   caller: fills entry/slots/begin/end/size, then stores seq + 1 (seq_cst); wakes sleepers.
;   worker: sees seq change (acquire), claims the chunk (claimed: seq - 1 -> seq), runs it,
;           stores code, then done = seq (release).
;   caller: after its own chunk, claims every chunk no worker has claimed yet and runs it
;           itself; for the others it waits for done == seq (acquire) and reads code.
; A worker that is slow to start (asleep, or descheduled on a busy machine) thus costs a
; launch no more than running its chunk on the calling thread would.
; Sleeping: a worker increments `sleepers` under the mutex and re-checks seq before waiting;
; the caller stores seq and then reads `sleepers`, both seq_cst, so either the worker sees the
; new seq or the caller sees the sleeper and broadcasts under the mutex: no lost wakeup.
;
; @SPIN_CYCLES@ and @PAUSE@ are filled in by pool.py.

; mailbox, 128 bytes apart (two cache lines: no false sharing between workers):
;   seq, done, entry, slots, begin, end, size, code, pool, claimed
%mailbox = type { i64, i64, ptr, ptr, i64, i64, i64, i32, ptr, i64 }
; pool: sleepers, stop, launching, workers, padding, pthread_mutex_t, pthread_cond_t (room
; for glibc's 40 and 48). `launching` is 1 while a launch (or a stop) has the pool: pool.py's
; lock orders Python's launches, and native launches (fast_launch.ll) only try for it.
%pool = type { i64, i64, i64, i64, [32 x i8], [64 x i8], [64 x i8] }

declare i32 @pthread_mutex_init(ptr, ptr)
declare i32 @pthread_cond_init(ptr, ptr)
declare i32 @pthread_mutex_lock(ptr)
declare i32 @pthread_mutex_unlock(ptr)
declare i32 @pthread_cond_wait(ptr, ptr)
declare i32 @pthread_cond_broadcast(ptr)
declare i32 @pthread_create(ptr, ptr, ptr, ptr)
declare i32 @pthread_join(i64, ptr)
declare i32 @sched_yield()
declare i64 @llvm.readcyclecounter()

define private void @relax() {
  @PAUSE@
  ret void
}

define private ptr @mailbox(ptr %boxes, i64 %w) {
  %offset = mul i64 %w, 128
  %box = getelementptr inbounds i8, ptr %boxes, i64 %offset
  ret ptr %box
}

; Spins until (*%addr == %value) is %equal or @SPIN_CYCLES@ cycles have passed; returns the
; last value read.
define private i64 @spin(ptr %addr, i64 %value, i1 %equal) {
entry:
  %t0 = call i64 @llvm.readcyclecounter()
  br label %loop
loop:
  %v = load atomic i64, ptr %addr acquire, align 8
  %is_equal = icmp eq i64 %v, %value
  %hit = icmp eq i1 %is_equal, %equal
  br i1 %hit, label %done, label %wait
wait:
  call void @relax()
  %t = call i64 @llvm.readcyclecounter()
  %spent = sub i64 %t, %t0
  %more = icmp ult i64 %spent, @SPIN_CYCLES@
  br i1 %more, label %loop, label %done
done:
  ret i64 %v
}

; Blocks on the pool's condition variable until the mailbox's seq differs from %seen.
define private i64 @sleep_while_equal(ptr %pool, ptr %seq, i64 %seen) {
entry:
  %sleepers = getelementptr inbounds %pool, ptr %pool, i32 0, i32 0
  %mutex = getelementptr inbounds %pool, ptr %pool, i32 0, i32 5
  %cond = getelementptr inbounds %pool, ptr %pool, i32 0, i32 6
  call i32 @pthread_mutex_lock(ptr %mutex)
  atomicrmw add ptr %sleepers, i64 1 seq_cst
  br label %check
check:
  %v = load atomic i64, ptr %seq seq_cst, align 8
  %same = icmp eq i64 %v, %seen
  br i1 %same, label %wait, label %woken
wait:
  call i32 @pthread_cond_wait(ptr %cond, ptr %mutex)
  br label %check
woken:
  atomicrmw sub ptr %sleepers, i64 1 seq_cst
  call i32 @pthread_mutex_unlock(ptr %mutex)
  ret i64 %v
}

; Whether this thread takes job %job of the mailbox (the worker and the caller race for it).
define private i1 @claim(ptr %box, i64 %job) {
  %claimed_at = getelementptr inbounds %mailbox, ptr %box, i32 0, i32 9
  %previous = sub i64 %job, 1
  %result = cmpxchg ptr %claimed_at, i64 %previous, i64 %job acq_rel monotonic
  %won = extractvalue { i64, i1 } %result, 1
  ret i1 %won
}

; Runs the chunk posted in the mailbox; returns the entry point's code.
define private i32 @run_posted(ptr %box) {
  %entry_at = getelementptr inbounds %mailbox, ptr %box, i32 0, i32 2
  %slots_at = getelementptr inbounds %mailbox, ptr %box, i32 0, i32 3
  %begin_at = getelementptr inbounds %mailbox, ptr %box, i32 0, i32 4
  %end_at = getelementptr inbounds %mailbox, ptr %box, i32 0, i32 5
  %size_at = getelementptr inbounds %mailbox, ptr %box, i32 0, i32 6
  %entry = load ptr, ptr %entry_at, align 8
  %slots = load ptr, ptr %slots_at, align 8
  %begin = load i64, ptr %begin_at, align 8
  %end = load i64, ptr %end_at, align 8
  %size = load i64, ptr %size_at, align 8
  %code = call i32 %entry(ptr %slots, i64 %begin, i64 %end, i64 %size)
  ret i32 %code
}

; A worker's turn at job %job: runs it unless the caller has claimed it.
define private void @take(ptr %box, i64 %job) {
entry:
  %won = call i1 @claim(ptr %box, i64 %job)
  br i1 %won, label %run, label %exit
run:
  %code = call i32 @run_posted(ptr %box)
  %code_at = getelementptr inbounds %mailbox, ptr %box, i32 0, i32 7
  %done_at = getelementptr inbounds %mailbox, ptr %box, i32 0, i32 1
  store i32 %code, ptr %code_at, align 8
  store atomic i64 %job, ptr %done_at release, align 8
  br label %exit
exit:
  ret void
}

; A worker thread's body: the argument is its mailbox.
define private ptr @worker(ptr %box) {
entry:
  %pool_at = getelementptr inbounds %mailbox, ptr %box, i32 0, i32 8
  %pool = load ptr, ptr %pool_at, align 8
  %seq = getelementptr inbounds %mailbox, ptr %box, i32 0, i32 0
  %stop_at = getelementptr inbounds %pool, ptr %pool, i32 0, i32 1
  br label %next
next:
  %seen = phi i64 [ 0, %entry ], [ %job, %run ]
  %spun = call i64 @spin(ptr %seq, i64 %seen, i1 false)
  %posted = icmp ne i64 %spun, %seen
  br i1 %posted, label %got, label %sleep
sleep:
  %slept = call i64 @sleep_while_equal(ptr %pool, ptr %seq, i64 %seen)
  br label %got
got:
  %job = phi i64 [ %spun, %next ], [ %slept, %sleep ]
  %stop = load atomic i64, ptr %stop_at acquire, align 8
  %stopping = icmp ne i64 %stop, 0
  br i1 %stopping, label %exit, label %run
run:
  call void @take(ptr %box, i64 %job)
  br label %next
exit:
  ret ptr null
}

define private void @wake_sleepers(ptr %pool) {
entry:
  %sleepers = getelementptr inbounds %pool, ptr %pool, i32 0, i32 0
  %mutex = getelementptr inbounds %pool, ptr %pool, i32 0, i32 5
  %cond = getelementptr inbounds %pool, ptr %pool, i32 0, i32 6
  %n = load atomic i64, ptr %sleepers seq_cst, align 8
  %any = icmp ne i64 %n, 0
  br i1 %any, label %wake, label %done
wake:
  call i32 @pthread_mutex_lock(ptr %mutex)
  call i32 @pthread_cond_broadcast(ptr %cond)
  call i32 @pthread_mutex_unlock(ptr %mutex)
  br label %done
done:
  ret void
}

define private void @bump_seq(ptr %box) {
  %seq = getelementptr inbounds %mailbox, ptr %box, i32 0, i32 0
  %old = load atomic i64, ptr %seq monotonic, align 8
  %new = add i64 %old, 1
  store atomic i64 %new, ptr %seq seq_cst, align 8
  ret void
}

define private void @post(ptr %box, ptr %entry, ptr %slots, i64 %begin, i64 %end, i64 %size) {
  %entry_at = getelementptr inbounds %mailbox, ptr %box, i32 0, i32 2
  %slots_at = getelementptr inbounds %mailbox, ptr %box, i32 0, i32 3
  %begin_at = getelementptr inbounds %mailbox, ptr %box, i32 0, i32 4
  %end_at = getelementptr inbounds %mailbox, ptr %box, i32 0, i32 5
  %size_at = getelementptr inbounds %mailbox, ptr %box, i32 0, i32 6
  store ptr %entry, ptr %entry_at, align 8
  store ptr %slots, ptr %slots_at, align 8
  store i64 %begin, ptr %begin_at, align 8
  store i64 %end, ptr %end_at, align 8
  store i64 %size, ptr %size_at, align 8
  call void @bump_seq(ptr %box)
  ret void
}

; The code of the chunk last posted to the mailbox: run here if its worker has not claimed
; it yet, else once the worker has finished it.
define private i32 @collect(ptr %box) {
entry:
  %seq = getelementptr inbounds %mailbox, ptr %box, i32 0, i32 0
  %done_at = getelementptr inbounds %mailbox, ptr %box, i32 0, i32 1
  %code_at = getelementptr inbounds %mailbox, ptr %box, i32 0, i32 7
  %job = load atomic i64, ptr %seq monotonic, align 8
  %won = call i1 @claim(ptr %box, i64 %job)
  br i1 %won, label %run_here, label %check
run_here:
  %own = call i32 @run_posted(ptr %box)
  ret i32 %own
check:
  %done = call i64 @spin(ptr %done_at, i64 %job, i1 true)
  %finished = icmp eq i64 %done, %job
  br i1 %finished, label %exit, label %yield
yield:
  ; a worker descheduled by an oversubscribed machine: give it the core
  call i32 @sched_yield()
  br label %check
exit:
  %code = load i32, ptr %code_at, align 8
  ret i32 %code
}

; Runs work-groups [bounds[2c], bounds[2c + 1]) of a launch of `size` for every chunk c <
; %chunks through the packed entry point %kernel: chunk c < %chunks - 1 on worker c, the last on the
; calling thread. Returns the bitwise or of the entry's return codes.
define private i32 @run_chunks(ptr %pool, ptr %boxes, ptr %kernel, ptr %slots, ptr %bounds,
                               i64 %chunks, i64 %size) {
entry:
  %workers = sub i64 %chunks, 1
  br label %post_loop
post_loop:
  %w = phi i64 [ 0, %entry ], [ %w_next, %post_one ]
  %posting = icmp ult i64 %w, %workers
  br i1 %posting, label %post_one, label %run_own
post_one:
  %box = call ptr @mailbox(ptr %boxes, i64 %w)
  %b0 = mul i64 %w, 2
  %b1 = add i64 %b0, 1
  %begin_at = getelementptr inbounds i64, ptr %bounds, i64 %b0
  %end_at = getelementptr inbounds i64, ptr %bounds, i64 %b1
  %begin = load i64, ptr %begin_at, align 8
  %end = load i64, ptr %end_at, align 8
  call void @post(ptr %box, ptr %kernel, ptr %slots, i64 %begin, i64 %end, i64 %size)
  %w_next = add i64 %w, 1
  br label %post_loop
run_own:
  call void @wake_sleepers(ptr %pool)
  %o0 = mul i64 %workers, 2
  %o1 = add i64 %o0, 1
  %own_begin_at = getelementptr inbounds i64, ptr %bounds, i64 %o0
  %own_end_at = getelementptr inbounds i64, ptr %bounds, i64 %o1
  %own_begin = load i64, ptr %own_begin_at, align 8
  %own_end = load i64, ptr %own_end_at, align 8
  %own = call i32 %kernel(ptr %slots, i64 %own_begin, i64 %own_end, i64 %size)
  br label %collect_loop
collect_loop:
  %c = phi i64 [ 0, %run_own ], [ %c_next, %collect_one ]
  %codes = phi i32 [ %own, %run_own ], [ %codes_next, %collect_one ]
  %collecting = icmp ult i64 %c, %workers
  br i1 %collecting, label %collect_one, label %exit
collect_one:
  %cbox = call ptr @mailbox(ptr %boxes, i64 %c)
  %code = call i32 @collect(ptr %cbox)
  %codes_next = or i32 %codes, %code
  %c_next = add i64 %c, 1
  br label %collect_loop
exit:
  ret i32 %codes
}

; Whether this thread now has the pool (`launching` was 0).
define private i1 @try_take(ptr %pool) {
  %launching = getelementptr inbounds %pool, ptr %pool, i32 0, i32 2
  %result = cmpxchg ptr %launching, i64 0, i64 1 acquire monotonic
  %taken = extractvalue { i64, i1 } %result, 1
  ret i1 %taken
}

; Waits until this thread has the pool: a native launch on it finishes first.
define private void @take_pool(ptr %pool) {
entry:
  br label %try
try:
  %taken = call i1 @try_take(ptr %pool)
  br i1 %taken, label %exit, label %wait
wait:
  call void @relax()
  call i32 @sched_yield()
  br label %try
exit:
  ret void
}

define private void @give_pool(ptr %pool) {
  %launching = getelementptr inbounds %pool, ptr %pool, i32 0, i32 2
  store atomic i64 0, ptr %launching release, align 8
  ret void
}

; @run_chunks for pool.py, which has checked that the pool has %chunks - 1 workers.
define i32 @nanotc_pool_run(ptr %pool, ptr %boxes, ptr %kernel, ptr %slots, ptr %bounds,
                            i64 %chunks, i64 %size) {
  call void @take_pool(ptr %pool)
  %code = call i32 @run_chunks(ptr %pool, ptr %boxes, ptr %kernel, ptr %slots, ptr %bounds,
                               i64 %chunks, i64 %size)
  call void @give_pool(ptr %pool)
  ret i32 %code
}

; @run_chunks for a native launch: -1, having run nothing, while another launch has the pool
; or where it has fewer than %chunks - 1 workers (none once stopped).
define i32 @nanotc_pool_try_run(ptr %pool, ptr %boxes, ptr %kernel, ptr %slots, ptr %bounds,
                                i64 %chunks, i64 %size) {
entry:
  %taken = call i1 @try_take(ptr %pool)
  br i1 %taken, label %count, label %refused
count:
  %workers_at = getelementptr inbounds %pool, ptr %pool, i32 0, i32 3
  %workers = load i64, ptr %workers_at, align 8
  %needed = sub i64 %chunks, 1
  %enough = icmp ule i64 %needed, %workers
  br i1 %enough, label %run, label %give_back
run:
  %code = call i32 @run_chunks(ptr %pool, ptr %boxes, ptr %kernel, ptr %slots, ptr %bounds,
                               i64 %chunks, i64 %size)
  call void @give_pool(ptr %pool)
  ret i32 %code
give_back:
  call void @give_pool(ptr %pool)
  br label %refused
refused:
  ret i32 -1
}

; Initialises the pool and starts %workers threads (ids into %threads); returns how many
; started.
define i64 @nanotc_pool_start(ptr %pool, ptr %boxes, i64 %workers, ptr %threads) {
entry:
  %mutex = getelementptr inbounds %pool, ptr %pool, i32 0, i32 5
  %cond = getelementptr inbounds %pool, ptr %pool, i32 0, i32 6
  call i32 @pthread_mutex_init(ptr %mutex, ptr null)
  call i32 @pthread_cond_init(ptr %cond, ptr null)
  br label %loop
loop:
  %w = phi i64 [ 0, %entry ], [ %w_next, %started ]
  %more = icmp ult i64 %w, %workers
  br i1 %more, label %start, label %exit
start:
  %box = call ptr @mailbox(ptr %boxes, i64 %w)
  %pool_at = getelementptr inbounds %mailbox, ptr %box, i32 0, i32 8
  store ptr %pool, ptr %pool_at, align 8
  %thread = getelementptr inbounds i64, ptr %threads, i64 %w
  %rc = call i32 @pthread_create(ptr %thread, ptr null, ptr @worker, ptr %box)
  %ok = icmp eq i32 %rc, 0
  br i1 %ok, label %started, label %exit
started:
  %w_next = add i64 %w, 1
  br label %loop
exit:
  %workers_at = getelementptr inbounds %pool, ptr %pool, i32 0, i32 3
  store i64 %w, ptr %workers_at, align 8
  ret i64 %w
}

; Stops and joins the first %workers workers, once no launch is running; a pool stopped
; before is left as it is. The pool stays taken: native launches find it so and run elsewhere.
define void @nanotc_pool_stop(ptr %pool, ptr %boxes, i64 %workers, ptr %threads) {
entry:
  %stop_at = getelementptr inbounds %pool, ptr %pool, i32 0, i32 1
  %before = load atomic i64, ptr %stop_at acquire, align 8
  %stopped = icmp ne i64 %before, 0
  br i1 %stopped, label %exit, label %take
take:
  call void @take_pool(ptr %pool)
  %workers_at = getelementptr inbounds %pool, ptr %pool, i32 0, i32 3
  store i64 0, ptr %workers_at, align 8
  store atomic i64 1, ptr %stop_at seq_cst, align 8
  br label %bump_loop
bump_loop:
  %w = phi i64 [ 0, %take ], [ %w_next, %bump ]
  %bumping = icmp ult i64 %w, %workers
  br i1 %bumping, label %bump, label %wake
bump:
  %box = call ptr @mailbox(ptr %boxes, i64 %w)
  call void @bump_seq(ptr %box)
  %w_next = add i64 %w, 1
  br label %bump_loop
wake:
  call void @wake_sleepers(ptr %pool)
  br label %join_loop
join_loop:
  %j = phi i64 [ 0, %wake ], [ %j_next, %join ]
  %joining = icmp ult i64 %j, %workers
  br i1 %joining, label %join, label %exit
join:
  %thread_at = getelementptr inbounds i64, ptr %threads, i64 %j
  %thread = load i64, ptr %thread_at, align 8
  call i32 @pthread_join(i64 %thread, ptr null)
  %j_next = add i64 %j, 1
  br label %join_loop
exit:
  ret void
}
