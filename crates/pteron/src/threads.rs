//! The thread pool kernels split their work across ([`pteron_core::Parallel`]).
//!
//! `ThreadPool::new(n)` starts `n - 1` worker threads; the thread that calls
//! [`Parallel::parallel_for`] is the n-th and takes tasks too, so a pool of 1 starts nothing and
//! runs everything inline. Each thread first takes the tasks of its own share of the range
//! (thread k always gets the same part of an image, layer after layer, so the rows it wrote
//! are still in its own cache when the next layer reads them), then helps with the others'
//! remaining tasks. Workers spin briefly between jobs
//! (kernels come back to back while a method runs) and then sleep on a condition variable.
//!
//! Another process busy on a worker's core (a phone's or laptop's usual state) changes what
//! pays. A worker that spins there spends its fair share of the core on nothing, and the
//! scheduler takes it off the core at the end of its slice, often in the middle of a task,
//! which then holds up the whole job for milliseconds; a spinning worker that shares the
//! caller's core halves the caller's speed. A thread that slept, on the other hand, is
//! preferred by the scheduler when it wakes. So a worker reads its own CPU time once per
//! [`SHARE_WINDOW`] of the time it was awake (spinning or in tasks, over as many jobs as that
//! takes): when it ran for less than [`RAN_MIN`] of a window, it shares its core, and it goes
//! to sleep instead of spinning; the next job wakes it. And the caller keeps an account of
//! whether the workers pay at all ([`Backoff`]): for each job, the time it would have taken
//! alone (its own tasks' time, scaled to all tasks) minus the time the job took; when a window
//! of jobs lost time, jobs run on the calling thread alone for a while, then the workers are
//! tried again. A loss in the next window doubles the while, a gain resets it. Last, the
//! scheduler sometimes puts a worker on the caller's own CPU (the other core being busy), where
//! the two only take turns; with three runnable threads on two cores it sees no imbalance to
//! fix, so that can last for many jobs. A worker that joins a job on the CPU the caller opened
//! it on moves itself off that CPU ([`move_off_cpu`]). One job runs at a time: a
//! `parallel_for` from another thread while the pool is busy, or from inside a task, runs
//! inline on its caller. Nothing is allocated per job.

use std::cell::UnsafeCell;
use std::ops::Range;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock, TryLockError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use pteron_core::Parallel;
use pteron_kernels_cpu::par::part;

/// How long an idle worker spins before it sleeps. Long enough to bridge a single-threaded
/// node of a network (an input transpose, a small GEMV): waking a sleeping worker takes tens
/// of microseconds on a VM, and the first conv of MobileNetV2 on 2 threads ran barely faster
/// than on one with 200 µs here (XNNPACK's pthreadpool spins for milliseconds too).
const SPIN: Duration = Duration::from_micros(2000);

/// How much awake time (spinning or in tasks) passes between a worker's reads of its CPU time
/// (a system call), to see whether it still has its core to itself.
const SHARE_WINDOW: Duration = Duration::from_micros(200);
/// A worker that ran for less than this share of a [`SHARE_WINDOW`] shares its core with
/// another thread, and sleeps instead of spinning.
const RAN_MIN: f64 = 0.7;
/// The wall time of jobs over which the caller sums what the workers saved or lost. A worker
/// beside a busy neighbour is still taken off its core mid-task now and then (a few ms lost
/// every ~200 ms with MobileNetV2) while it gains on every other job: the window must be long
/// enough to weigh both, or those rare stalls alone send jobs inline.
const ACCOUNT_WINDOW: Duration = Duration::from_millis(50);
/// A window that lost less than this share of its wall time is noise, such as jobs the caller
/// ran nearly alone (a sleeping worker woke late) at the cost of the hand-off.
const LOSS_MIN: f64 = 0.05;
/// How long jobs run on the calling thread alone after a window in which the workers lost
/// time, and the cap the doubling reaches when losses go on.
const BACKOFF_FIRST: Duration = Duration::from_millis(50);
const BACKOFF_MAX: Duration = Duration::from_millis(1600);

/// `state` layout: job epoch in the high 32 bits, `OPEN` while tasks may still be taken, and
/// the number of workers inside the current job in the low 31 bits.
const OPEN: u64 = 1 << 31;
const ACTIVE: u64 = OPEN - 1;

fn epoch(s: u64) -> u32 {
    (s >> 32) as u32
}

type TaskFn = dyn Fn(Range<usize>) + Sync;

#[derive(Clone, Copy)]
struct Job {
    /// The caller's closure, its lifetime erased: valid while the job is open or any worker is
    /// inside it (the caller waits for both to end before returning).
    f: *const TaskFn,
    n: usize,
    chunk: usize,
}

/// A task cursor on its own cache line (threads claim from each other's cursors).
#[repr(align(64))]
struct Cursor(AtomicUsize);

struct Shared {
    state: AtomicU64,
    /// Per thread (0 = the caller): the next task of its share `part(n, threads, k)`.
    cursors: Box<[Cursor]>,
    /// Written only by the caller that holds `ThreadPool::busy`, while the previous job is closed
    /// and no worker is inside it; read by workers only after joining the current job.
    job: UnsafeCell<Option<Job>>,
    sleepers: AtomicUsize,
    lock: Mutex<()>,
    wake: Condvar,
    shutdown: AtomicBool,
    panicked: AtomicBool,
    /// The CPU the caller ran on when it opened the current job (`usize::MAX`: unknown).
    caller_cpu: AtomicUsize,
}

// Safety: `job` is the only non-Sync field. Its protocol (see the field) makes every write
// happen-before the reads of workers that join that job (the write precedes the releasing store
// of the new epoch; joining is an acquiring compare-exchange on the same atomic), and no write
// happens while a worker may read (the caller waits for the active count to reach zero after
// closing the job). The closure it points to is `Sync`, so calling it from several threads is
// allowed.
unsafe impl Sync for Shared {}
// Safety: the raw pointer inside `job` is only dereferenced under the protocol above; the rest
// of `Shared` is Send.
unsafe impl Send for Shared {}

impl Shared {
    /// Runs tasks of `job` as thread `me`: its own share first, then what is left of the
    /// others' shares. Returns how many indices it ran.
    fn run_tasks(&self, job: &Job, me: usize) -> usize {
        // Safety: the job is open or this thread is counted as active in it (caller or joined
        // worker), so the closure's owner is still waiting in `parallel_for`.
        let f = unsafe { &*job.f };
        let t = self.cursors.len();
        let mut ran = 0;
        for k in 0..t {
            let q = (me + k) % t;
            let end = part(job.n, t, q).end;
            loop {
                let start = self.cursors[q].0.fetch_add(job.chunk, Ordering::Relaxed);
                if start >= end {
                    break;
                }
                let r = start..(start + job.chunk).min(end);
                ran += r.len();
                f(r);
            }
        }
        ran
    }

    fn worker(&self, me: usize) {
        let mut seen = epoch(self.state.load(Ordering::Acquire));
        // A new worker sleeps until the first job: spinning from the start would compete
        // with the loading of the method the pool was made for.
        let mut started = false;
        let mut share = CoreShare::default();
        loop {
            // Wait for a new job.
            let t0 = Instant::now();
            let mut spins = 0u32;
            let mut spin = started && share.has_core(t0, thread_cpu_time);
            loop {
                if self.shutdown.load(Ordering::Acquire) {
                    return;
                }
                if epoch(self.state.load(Ordering::Acquire)) != seen {
                    break;
                }
                spins = spins.wrapping_add(1);
                if spin {
                    if spins & 63 == 0 {
                        let now = Instant::now();
                        spin =
                            now.duration_since(t0) < SPIN && share.has_core(now, thread_cpu_time);
                    }
                    if spin {
                        std::hint::spin_loop();
                        continue;
                    }
                }
                let mut g = self.lock.lock().unwrap_or_else(|e| e.into_inner());
                self.sleepers.fetch_add(1, Ordering::SeqCst);
                while epoch(self.state.load(Ordering::SeqCst)) == seen
                    && !self.shutdown.load(Ordering::SeqCst)
                {
                    g = self.wake.wait(g).unwrap_or_else(|e| e.into_inner());
                }
                self.sleepers.fetch_sub(1, Ordering::SeqCst);
                drop(g);
                share.slept();
                break;
            }
            started = true;
            // Join it if it is still open.
            let mut s = self.state.load(Ordering::Acquire);
            seen = epoch(s);
            let joined = loop {
                if s & OPEN == 0 || epoch(s) != seen {
                    break false;
                }
                match self.state.compare_exchange_weak(
                    s,
                    s + 1,
                    Ordering::AcqRel,
                    Ordering::Acquire,
                ) {
                    Ok(_) => break true,
                    Err(x) => s = x,
                }
            };
            if joined {
                // Safety: this worker is counted as active in the current job, so the caller
                // does not write `job` until it leaves (see `Shared::job`).
                if let Some(job) = unsafe { *self.job.get() } {
                    if let Some(c) = current_cpu() {
                        if c == self.caller_cpu.load(Ordering::Relaxed) {
                            move_off_cpu(c);
                        }
                    }
                    if catch_unwind(AssertUnwindSafe(|| self.run_tasks(&job, me))).is_err() {
                        self.panicked.store(true, Ordering::Relaxed);
                    }
                }
                self.state.fetch_sub(1, Ordering::Release);
            }
        }
    }
}

/// Closes the current job and waits until no worker is inside it; on drop, so that it also
/// happens when a task panics on the calling thread.
struct Close<'a>(&'a Shared);

impl Drop for Close<'_> {
    fn drop(&mut self) {
        let s = self.0;
        s.state.fetch_and(!OPEN, Ordering::AcqRel);
        while s.state.load(Ordering::Acquire) & ACTIVE != 0 {
            std::hint::spin_loop();
        }
        // Safety: the job is closed and no worker is inside it; this thread holds `busy`.
        unsafe { *s.job.get() = None };
    }
}

/// A worker's view of whether it has its core to itself: its CPU time against the wall time
/// it was awake (spinning or in tasks), window by window. Kept from job to job: a worker taken
/// off its core while spinning usually comes back to a new job, and only the next wait can
/// tell it what happened.
#[derive(Default)]
struct CoreShare {
    /// Wall and CPU time at the start of the current window.
    start: Option<(Instant, Duration)>,
}

impl CoreShare {
    /// The thread slept: time asleep is not time it lost to another thread.
    fn slept(&mut self) {
        self.start = None;
    }

    /// Whether the thread may spin at the time `now`; `cpu` reads its CPU time (`None` where
    /// the platform does not say: spin on), once per window.
    fn has_core(&mut self, now: Instant, cpu: impl FnOnce() -> Option<Duration>) -> bool {
        if self
            .start
            .is_some_and(|(t, _)| now.duration_since(t) < SHARE_WINDOW)
        {
            return true;
        }
        let Some(cpu) = cpu() else { return true };
        match self.start {
            Some((t, c)) => {
                let wall = now.duration_since(t);
                self.start = Some((now, cpu));
                cpu.saturating_sub(c).as_secs_f64() >= RAN_MIN * wall.as_secs_f64()
            }
            None => {
                self.start = Some((now, cpu));
                true
            }
        }
    }
}

/// The caller's account of whether the workers pay, and for how long jobs run inline because
/// they did not. Read and written only by the caller holding `ThreadPool::busy`.
#[derive(Debug)]
struct Backoff {
    /// Jobs run on the calling thread alone until then.
    inline_until: Option<Instant>,
    /// The next back-off's length.
    next: Duration,
    /// The current window: the wall time of its jobs, and the seconds they saved (negative:
    /// lost) against the caller alone.
    wall: Duration,
    saved: f64,
}

impl Backoff {
    fn new() -> Self {
        Backoff {
            inline_until: None,
            next: BACKOFF_FIRST,
            wall: Duration::ZERO,
            saved: 0.0,
        }
    }

    /// Whether the next job should leave the workers out.
    fn inline_now(&mut self, now: Instant) -> bool {
        match self.inline_until {
            Some(t) if now < t => true,
            Some(_) => {
                self.inline_until = None;
                false
            }
            None => false,
        }
    }

    /// Records a parallel job of `n` indices that took `wall`, in which the caller ran `mine`
    /// of them in `work`.
    fn record(&mut self, now: Instant, wall: Duration, work: Duration, mine: usize, n: usize) {
        // The caller alone would have run all `n` at its own pace. A caller that ran none (the
        // workers took everything before it started) says nothing either way.
        if mine > 0 {
            let alone = work.as_secs_f64() * n as f64 / mine as f64;
            self.saved += alone - wall.as_secs_f64();
        }
        self.wall += wall;
        if self.wall < ACCOUNT_WINDOW {
            return;
        }
        if self.saved < -LOSS_MIN * self.wall.as_secs_f64() {
            self.inline_until = Some(now + self.next);
            self.next = (self.next * 2).min(BACKOFF_MAX);
        } else {
            self.next = BACKOFF_FIRST;
        }
        self.wall = Duration::ZERO;
        self.saved = 0.0;
    }
}

/// The CPU the calling thread runs on (`None` where the platform does not say).
fn current_cpu() -> Option<usize> {
    #[cfg(target_os = "linux")]
    {
        // Safety: FFI without arguments; it only reads the calling thread's CPU number.
        let c = unsafe { libc::sched_getcpu() };
        usize::try_from(c).ok()
    }
    #[cfg(not(target_os = "linux"))]
    {
        None
    }
}

/// Moves the calling thread off `cpu` (a worker that found itself on the caller's CPU), where
/// the platform allows it: its affinity is set to exclude `cpu`, which makes the kernel migrate
/// it now, and is then given back, so later placements are the scheduler's again.
fn move_off_cpu(cpu: usize) {
    #[cfg(not(target_os = "linux"))]
    let _ = cpu;
    #[cfg(target_os = "linux")]
    {
        let size = std::mem::size_of::<libc::cpu_set_t>();
        if cpu >= 8 * size {
            return;
        }
        let Some(all) = affinity() else { return };
        let mut set = all;
        // Safety: `cpu` is within the set (checked above); the macros only read and write the
        // set's bits.
        unsafe {
            if !libc::CPU_ISSET(cpu, &set) {
                return;
            }
            libc::CPU_CLR(cpu, &mut set);
            if libc::CPU_COUNT(&set) == 0 {
                return;
            }
        }
        // Safety: FFI on this thread's own mask (pid 0 = the calling thread), from valid sets.
        unsafe {
            if libc::sched_setaffinity(0, size, &set) == 0 {
                libc::sched_setaffinity(0, size, &all);
            }
        }
    }
}

/// The calling thread's CPU affinity mask.
#[cfg(target_os = "linux")]
fn affinity() -> Option<libc::cpu_set_t> {
    // Safety: FFI writing the calling thread's mask (pid 0) into a zeroed, valid cpu_set_t.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        let r = libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set);
        (r == 0).then_some(set)
    }
}

/// CPU time the calling thread has run (`None` where the platform does not say).
#[cfg(unix)]
pub fn thread_cpu_time() -> Option<Duration> {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // Safety: FFI; `ts` is a valid, writable timespec, and the call only writes it.
    let r = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    let secs = u64::try_from(ts.tv_sec).ok()?;
    let nanos = u32::try_from(ts.tv_nsec).ok()?;
    (r == 0).then(|| Duration::new(secs, nanos))
}

/// CPU time the calling thread has run (`None` where the platform does not say).
#[cfg(not(unix))]
pub fn thread_cpu_time() -> Option<Duration> {
    None
}

/// A pool of threads for kernels (see the module documentation).
pub struct ThreadPool {
    shared: Arc<Shared>,
    workers: Vec<JoinHandle<()>>,
    /// Held by the caller of the running job; guards the back-off state.
    busy: Mutex<Backoff>,
}

impl ThreadPool {
    /// A pool of `threads` threads in all (the caller included): `threads - 1` workers are
    /// started. `0` means [`default_threads`]. Where the platform has no threads (WebAssembly
    /// without atomics) the pool is the calling thread alone.
    pub fn new(threads: usize) -> std::io::Result<Self> {
        let threads = if threads == 0 {
            default_threads()
        } else {
            threads
        };
        let shared = Arc::new(Shared {
            state: AtomicU64::new(0),
            cursors: (0..threads.max(1))
                .map(|_| Cursor(AtomicUsize::new(0)))
                .collect(),
            job: UnsafeCell::new(None),
            sleepers: AtomicUsize::new(0),
            lock: Mutex::new(()),
            wake: Condvar::new(),
            shutdown: AtomicBool::new(false),
            panicked: AtomicBool::new(false),
            caller_cpu: AtomicUsize::new(usize::MAX),
        });
        let mut pool = ThreadPool {
            shared,
            workers: Vec::new(),
            busy: Mutex::new(Backoff::new()),
        };
        for i in 1..threads {
            let s = Arc::clone(&pool.shared);
            let h = std::thread::Builder::new()
                .name(format!("pteron-{i}"))
                .spawn(move || s.worker(i));
            match h {
                Ok(h) => pool.workers.push(h),
                Err(e) if e.kind() == std::io::ErrorKind::Unsupported && i == 1 => {
                    return ThreadPool::new(1);
                }
                Err(e) => return Err(e),
            }
        }
        Ok(pool)
    }

    /// Threads in the pool, the calling thread included.
    pub fn threads(&self) -> usize {
        self.workers.len() + 1
    }
}

impl Parallel for ThreadPool {
    fn num_threads(&self) -> usize {
        self.threads()
    }

    fn parallel_for(&self, n: usize, f: &(dyn Fn(Range<usize>) + Sync)) {
        if n == 0 {
            return;
        }
        if self.workers.is_empty() || n == 1 {
            f(0..n);
            return;
        }
        let mut busy = match self.busy.try_lock() {
            Ok(g) => g,
            Err(TryLockError::Poisoned(e)) => e.into_inner(),
            Err(TryLockError::WouldBlock) => {
                f(0..n);
                return;
            }
        };
        let start = Instant::now();
        if busy.inline_now(start) {
            drop(busy);
            f(0..n);
            return;
        }
        let threads = self.threads();
        let chunk = (n / (threads * 8)).max(1);
        let sh = &*self.shared;
        // Safety: only the lifetime bound of the trait object changes. The pointer is used only
        // while this call has not returned: `Close` (dropped before `f` goes out of scope, also
        // on unwind) closes the job and waits for every worker that joined it.
        let f: *const TaskFn =
            unsafe { std::mem::transmute::<&(dyn Fn(Range<usize>) + Sync + '_), *const TaskFn>(f) };
        let job = Job { f, n, chunk };
        // Safety: no job is open and no worker is inside one (the previous `Close` waited), and
        // this thread holds `busy`, so nobody reads or writes `job` now.
        unsafe { *sh.job.get() = Some(job) };
        for (k, c) in sh.cursors.iter().enumerate() {
            c.0.store(part(n, threads, k).start, Ordering::Relaxed);
        }
        sh.panicked.store(false, Ordering::Relaxed);
        sh.caller_cpu
            .store(current_cpu().unwrap_or(usize::MAX), Ordering::Relaxed);
        let e = epoch(sh.state.load(Ordering::Relaxed)).wrapping_add(1);
        sh.state.store(((e as u64) << 32) | OPEN, Ordering::SeqCst);
        if sh.sleepers.load(Ordering::SeqCst) > 0 {
            let _g = sh.lock.lock().unwrap_or_else(|e| e.into_inner());
            sh.wake.notify_all();
        }
        let close = Close(sh);
        let mine = sh.run_tasks(&job, 0);
        let worked = Instant::now();
        drop(close);
        let done = Instant::now();
        busy.record(done, done - start, worked - start, mine, n);
        if sh.panicked.swap(false, Ordering::Relaxed) {
            panic!("a pteron worker thread panicked in a kernel");
        }
    }
}

impl Drop for ThreadPool {
    fn drop(&mut self) {
        self.shared.shutdown.store(true, Ordering::SeqCst);
        {
            let _g = self.shared.lock.lock().unwrap_or_else(|e| e.into_inner());
            self.shared.wake.notify_all();
        }
        for h in self.workers.drain(..) {
            let _ = h.join();
        }
    }
}

impl std::fmt::Debug for ThreadPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ThreadPool")
            .field("threads", &self.threads())
            .finish()
    }
}

/// Physical cores this process may use: distinct (package, core) pairs in /proc/cpuinfo on
/// Linux, capped by `available_parallelism` (which follows affinity and cgroup limits).
pub fn default_threads() -> usize {
    static N: OnceLock<usize> = OnceLock::new();
    *N.get_or_init(|| {
        let logical = std::thread::available_parallelism().map_or(1, |n| n.get());
        physical_cores().map_or(logical, |p| p.clamp(1, logical))
    })
}

fn physical_cores() -> Option<usize> {
    let text = std::fs::read_to_string("/proc/cpuinfo").ok()?;
    let mut cores = std::collections::BTreeSet::new();
    let (mut package, mut core) = (None, None);
    for line in text.lines().chain(std::iter::once("")) {
        if line.trim().is_empty() {
            if let (Some(p), Some(c)) = (package.take(), core.take()) {
                cores.insert((p, c));
            }
            continue;
        }
        let mut kv = line.splitn(2, ':');
        let (k, v) = (kv.next()?.trim(), kv.next().unwrap_or("").trim());
        match k {
            "physical id" => package = v.parse::<u32>().ok(),
            "core id" => core = v.parse::<u32>().ok(),
            _ => {}
        }
    }
    (!cores.is_empty()).then_some(cores.len())
}

/// The pool shared by methods loaded with the default thread count.
pub(crate) fn default_pool() -> Option<Arc<ThreadPool>> {
    static POOL: OnceLock<Option<Arc<ThreadPool>>> = OnceLock::new();
    POOL.get_or_init(|| {
        let n = default_threads();
        (n > 1)
            .then(|| ThreadPool::new(n).ok().map(Arc::new))
            .flatten()
    })
    .clone()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    #[test]
    fn covers_every_index_once() {
        for threads in [1, 2, 3, 4] {
            let pool = ThreadPool::new(threads).unwrap();
            assert_eq!(pool.num_threads(), threads);
            for n in [0, 1, 2, 5, 17, 1000] {
                let hits: Vec<AtomicUsize> = (0..n).map(|_| AtomicUsize::new(0)).collect();
                pool.parallel_for(n, &|r| {
                    for i in r {
                        hits[i].fetch_add(1, Ordering::Relaxed);
                    }
                });
                assert!(hits.iter().all(|h| h.load(Ordering::Relaxed) == 1));
            }
        }
    }

    #[test]
    fn nested_and_concurrent_calls_run_inline() {
        let pool = Arc::new(ThreadPool::new(2).unwrap());
        let total = AtomicUsize::new(0);
        pool.parallel_for(4, &|r| {
            for _ in r {
                pool.parallel_for(3, &|r2| {
                    total.fetch_add(r2.len(), Ordering::Relaxed);
                });
            }
        });
        assert_eq!(total.load(Ordering::Relaxed), 12);
        let handles: Vec<_> = (0..4)
            .map(|_| {
                let p = Arc::clone(&pool);
                std::thread::spawn(move || {
                    let c = AtomicUsize::new(0);
                    for _ in 0..200 {
                        p.parallel_for(64, &|r| {
                            c.fetch_add(r.len(), Ordering::Relaxed);
                        });
                    }
                    c.load(Ordering::Relaxed)
                })
            })
            .collect();
        for h in handles {
            assert_eq!(h.join().unwrap(), 200 * 64);
        }
    }

    /// Whether the current thread is one of a pool's workers.
    fn on_worker() -> bool {
        std::thread::current()
            .name()
            .is_some_and(|n| n.starts_with("pteron-"))
    }

    /// Runs a 2-task job in which the worker, once it holds task 1, stays in it for `hold`
    /// (the caller waits for it to start, up to a second). Returns whether it took part.
    fn job_with_a_straggler(pool: &ThreadPool, hold: Duration) -> bool {
        let started = AtomicBool::new(false);
        pool.parallel_for(2, &|r| {
            if on_worker() {
                started.store(true, Ordering::Release);
                std::thread::sleep(hold);
            } else if r.start == 0 {
                let t0 = Instant::now();
                while !started.load(Ordering::Acquire) && t0.elapsed() < Duration::from_secs(1) {
                    std::hint::spin_loop();
                }
            }
        });
        started.load(Ordering::Acquire)
    }

    /// Runs `job` until it returns true, up to 5 times: a hiccup of a loaded or emulated
    /// machine may itself look like a stall and send jobs inline for a while.
    fn eventually(job: impl Fn() -> bool) -> bool {
        (0..5).any(|i| {
            if i > 0 {
                std::thread::sleep(BACKOFF_MAX + Duration::from_millis(10));
            }
            job()
        })
    }

    #[test]
    fn a_stalling_worker_sends_jobs_inline_for_a_while() {
        let pool = ThreadPool::new(2).unwrap();
        // A worker that starts after a job was posted waits for the next one: let it start.
        std::thread::sleep(Duration::from_millis(20));
        // A worker held far longer than the caller worked: a stall.
        assert!(eventually(|| job_with_a_straggler(
            &pool,
            Duration::from_millis(100)
        )));
        // Right after (within the back-off), the caller runs every task itself.
        let stalled = Instant::now();
        let on_workers = AtomicUsize::new(0);
        pool.parallel_for(1000, &|r| {
            if on_worker() {
                on_workers.fetch_add(r.len(), Ordering::Relaxed);
            }
        });
        if stalled.elapsed() < BACKOFF_FIRST {
            assert_eq!(on_workers.load(Ordering::Relaxed), 0);
        }
        // Once the back-off has passed, the workers take part again.
        std::thread::sleep(BACKOFF_FIRST + Duration::from_millis(10));
        assert!(eventually(|| job_with_a_straggler(&pool, Duration::ZERO)));
    }

    #[test]
    fn backoff_doubles_on_lost_windows_and_resets_after_a_gain() {
        let t0 = Instant::now();
        let mut b = Backoff::new();
        let ms = Duration::from_millis;
        let us = Duration::from_micros;
        let w = ACCOUNT_WINDOW;
        // Half the tasks in 90 µs, the job in 100 µs: a gain, and the window is still open.
        b.record(t0, us(100), us(90), 1, 2);
        assert!(!b.inline_now(t0));
        // A straggler: half the tasks in 50 µs, the job a whole window long. The window lost.
        b.record(t0, w, us(50), 1, 2);
        assert!(b.inline_now(t0 + BACKOFF_FIRST - ms(1)));
        assert!(!b.inline_now(t0 + BACKOFF_FIRST + ms(1)));
        assert_eq!(b.next, BACKOFF_FIRST * 2);
        // A window that gained resets the back-off.
        b.record(t0, w, w * 4 / 5, 1, 2);
        assert!(!b.inline_now(t0));
        assert_eq!(b.next, BACKOFF_FIRST);
        for _ in 0..20 {
            b.record(t0, w, us(10), 1, 2);
        }
        assert_eq!(b.next, BACKOFF_MAX);
    }

    #[test]
    fn an_occasional_straggler_is_outweighed_by_the_gains() {
        let t0 = Instant::now();
        let mut b = Backoff::new();
        let w = ACCOUNT_WINDOW;
        // Jobs that each took a twentieth of the window with the caller busy 90 % of it on half
        // the tasks (each saved 80 % of its wall time), then one stalled job a fifth of the
        // window long in which the caller worked 2 % of it: the window gained.
        for _ in 0..16 {
            b.record(t0, w / 20, w / 20 * 9 / 10, 1, 2);
        }
        b.record(t0, w / 5, w / 50, 1, 2);
        assert!(!b.inline_now(t0));
        assert_eq!(b.next, BACKOFF_FIRST);
        // A job the workers ran alone counts neither way.
        b.record(t0, w, w / 100, 0, 2);
        assert!(!b.inline_now(t0));
        // Jobs the caller ran alone (a sleeping worker woke too late) lose only the hand-off.
        b.record(t0, w, w * 999 / 1000, 16, 16);
        assert!(!b.inline_now(t0));
        assert_eq!(b.next, BACKOFF_FIRST);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn a_thread_moves_off_a_cpu_and_keeps_its_affinity() {
        // On a thread of its own: the test harness's threads are not ours to move.
        std::thread::spawn(|| {
            let before = affinity().unwrap();
            // Safety: CPU_COUNT only reads the set.
            let cpus = unsafe { libc::CPU_COUNT(&before) };
            let moved = (0..5).any(|_| {
                let c = current_cpu().unwrap();
                move_off_cpu(c);
                current_cpu() != Some(c)
            });
            // Safety: CPU_EQUAL only reads both sets.
            assert!(unsafe { libc::CPU_EQUAL(&before, &affinity().unwrap()) });
            assert!(moved || cpus < 2);
        })
        .join()
        .unwrap();
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn the_current_cpu_is_known_on_linux() {
        assert!(current_cpu().is_some());
    }

    #[test]
    fn a_worker_that_shares_its_core_stops_spinning() {
        let t0 = Instant::now();
        let us = Duration::from_micros;
        let mut c = CoreShare::default();
        assert!(c.has_core(t0, || Some(us(1000))));
        // Within a window the CPU clock is not read.
        assert!(c.has_core(t0 + us(100), || panic!("read within the window")));
        // Ran 240 µs of 250: the core is its own.
        assert!(c.has_core(t0 + us(250), || Some(us(1240))));
        // Ran 100 µs of the next 250: shared.
        assert!(!c.has_core(t0 + us(500), || Some(us(1340))));
        // Time asleep does not count: the next window starts after the sleep.
        c.slept();
        assert!(c.has_core(t0 + us(5000), || Some(us(1400))));
        assert!(c.has_core(t0 + us(5250), || Some(us(1640))));
        // Where the CPU time is unknown, it spins.
        let mut d = CoreShare::default();
        assert!(d.has_core(t0, || None));
        assert!(d.has_core(t0 + us(500), || None));
    }

    #[cfg(unix)]
    #[test]
    fn thread_cpu_time_advances_with_work() {
        let c0 = thread_cpu_time().unwrap();
        let t = Instant::now();
        let mut x = 0u64;
        while t.elapsed() < Duration::from_millis(20) {
            x = core::hint::black_box(x.wrapping_add(1));
        }
        let c1 = thread_cpu_time().unwrap();
        assert!(c1 > c0 && c1 - c0 <= t.elapsed() + Duration::from_millis(5));
    }

    #[test]
    fn sleeping_workers_wake_up() {
        let pool = ThreadPool::new(2).unwrap();
        std::thread::sleep(SPIN * 5);
        let c = AtomicUsize::new(0);
        pool.parallel_for(1000, &|r| {
            c.fetch_add(r.len(), Ordering::Relaxed);
        });
        assert_eq!(c.load(Ordering::Relaxed), 1000);
    }

    // Needs unwinding (wasm32 aborts on panic).
    #[cfg(panic = "unwind")]
    #[test]
    fn a_panicking_task_is_reported_and_the_pool_keeps_working() {
        let pool = ThreadPool::new(2).unwrap();
        let r = catch_unwind(AssertUnwindSafe(|| {
            pool.parallel_for(64, &|r| {
                if r.contains(&63) {
                    panic!("boom");
                }
            })
        }));
        assert!(r.is_err());
        let c = AtomicUsize::new(0);
        pool.parallel_for(64, &|r| {
            c.fetch_add(r.len(), Ordering::Relaxed);
        });
        assert_eq!(c.load(Ordering::Relaxed), 64);
    }

    #[test]
    fn default_threads_is_positive() {
        assert!(default_threads() >= 1);
    }
}
