//! Profiled launches: what a kernel did to memory and to the simdgroup matrix
//! units, counted while it ran (`msl_emu_shim/metile_emu/profile.h`).
//!
//! A profiled kernel is a build variant of its own (`EmuCompiler::with_profiling`,
//! cached apart): the checked build with the shim's counting compiled in. Each
//! worker thread hands the library a [`ProfileState`] for the group it runs:
//! the counters, a log of each thread's threadgroup accesses since the last
//! synchronisation point (from which the shim pairs lanes into access
//! instructions and computes their bank conflicts) and a word set for that
//! analysis. The host adds up the groups' counters into an [`EmuProfile`].

use super::EmuError;
use std::cell::RefCell;

macro_rules! profile_counters {
    ($($(#[doc = $doc:literal])* $name:ident,)*) => {
        /// The counts of one profiled launch (or of several, added up). Loads
        /// and stores are counted per thread; `*_instructions`, `*_wavefronts`
        /// and the matrix counts per simdgroup; barriers per threadgroup.
        /// `docs/msl-emu.md` ("Profiling") says what each means.
        #[derive(Clone, Debug, Default, PartialEq, Eq)]
        pub struct EmuProfile {
            $($(#[doc = $doc])* pub $name: u64,)*
            /// The threadgroup access instructions by MSL line and direction,
            /// most wavefronts first.
            pub threadgroup_sites: Vec<ThreadgroupSite>,
        }

        /// The counters in the order of `ProfileCounter` in profile.h.
        const COUNTER_NAMES: &[&str] = &[$(stringify!($name)),*];

        impl EmuProfile {
            fn from_counters(counters: &[u64; COUNTER_COUNT]) -> Self {
                let mut values = counters.iter().copied();
                EmuProfile { $($name: values.next().unwrap_or(0),)* threadgroup_sites: Vec::new() }
            }

            /// Every counter with its name, in a fixed order.
            pub fn fields(&self) -> Vec<(&'static str, u64)> {
                vec![$((stringify!($name), self.$name)),*]
            }

            /// Adds `other`'s counts to these (sites of one line and direction merge).
            pub fn add(&mut self, other: &EmuProfile) {
                $(self.$name += other.$name;)*
                for site in &other.threadgroup_sites {
                    self.add_site(*site);
                }
                self.sort_sites();
            }
        }
    };
}

profile_counters! {
    /// Threadgroup-memory loads, per thread (a simdgroup_load: one per lane).
    threadgroup_loads,
    threadgroup_load_bytes,
    /// Threadgroup-memory stores (atomics count here), per thread.
    threadgroup_stores,
    threadgroup_store_bytes,
    device_loads,
    device_load_bytes,
    /// Device-memory stores (atomics count here), per thread.
    device_stores,
    device_store_bytes,
    /// Loads of constant memory (scalar arguments, program-scope constants).
    constant_loads,
    constant_load_bytes,
    /// Threadgroup load instructions: the lanes' n-th loads between two synchronisation points.
    threadgroup_load_instructions,
    /// Sum of the bank-conflict degrees of the load instructions (32 banks of 4 bytes).
    threadgroup_load_wavefronts,
    threadgroup_store_instructions,
    threadgroup_store_wavefronts,
    /// What the instructions need at least, conflicts or not: per instruction
    /// `ceil(distinct words / 32)` (more than 1 for accesses wider than 4 bytes).
    threadgroup_min_wavefronts,
    /// Threadgroup accesses past the log's capacity: counted, but in no instruction.
    unpaired_threadgroup_accesses,
    /// Intervals between synchronisation points whose lanes logged different
    /// access sequences (divergent control flow, or returned lanes).
    divergent_intervals,
    /// Instructions touching more distinct words than the analysis holds (4096).
    oversized_instructions,
    /// `simdgroup_multiply_accumulate` (and `simdgroup_multiply`, `*`), per simdgroup.
    simdgroup_mma,
    matrix_loads_threadgroup,
    matrix_loads_device,
    matrix_stores_threadgroup,
    matrix_stores_device,
    /// Metal 4 `matmul2d` runs (16x32x16), per simdgroup.
    matmul2d_runs,
    /// Completed `threadgroup_barrier`s, per threadgroup.
    threadgroup_barriers,
    /// Completed `simdgroup_barrier`s, per simdgroup.
    simdgroup_barriers,
    /// Every completed SIMD-group operation (shuffles, reductions, matrix
    /// products, simdgroup barriers), per simdgroup.
    simd_operations,
    /// Threadgroups that ran to their end.
    threadgroups,
    threads,
}

/// What the threadgroup access instructions of one MSL line cost, loads and
/// stores apart.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ThreadgroupSite {
    /// The line of the kernel's MSL that made the accesses (the innermost
    /// frame in the kernel source, through inlined shim functions); `None`
    /// where the line tables do not say, and for the sites past the 511 a
    /// worker tells apart.
    pub msl_line: Option<u32>,
    pub store: bool,
    pub instructions: u64,
    pub wavefronts: u64,
    pub min_wavefronts: u64,
}

/// `profile_counter_count` in profile.h.
pub(crate) const COUNTER_COUNT: usize = 29;
const _: () = assert!(COUNTER_NAMES.len() == COUNTER_COUNT);

impl EmuProfile {
    /// Threadgroup access instructions, loads and stores.
    pub fn threadgroup_instructions(&self) -> u64 {
        self.threadgroup_load_instructions + self.threadgroup_store_instructions
    }

    /// Wavefronts of all threadgroup access instructions.
    pub fn threadgroup_wavefronts(&self) -> u64 {
        self.threadgroup_load_wavefronts + self.threadgroup_store_wavefronts
    }

    /// Wavefronts per threadgroup access instruction (1 is conflict-free for
    /// accesses of 4 bytes or less); `None` without threadgroup accesses.
    pub fn bank_conflict_ratio(&self) -> Option<f64> {
        let instructions = self.threadgroup_instructions();
        (instructions > 0).then(|| self.threadgroup_wavefronts() as f64 / instructions as f64)
    }

    /// Wavefronts over the least the same accesses need (1 is conflict-free
    /// whatever the access width); `None` without threadgroup accesses.
    pub fn bank_conflict_excess(&self) -> Option<f64> {
        (self.threadgroup_min_wavefronts > 0)
            .then(|| self.threadgroup_wavefronts() as f64 / self.threadgroup_min_wavefronts as f64)
    }

    fn add_site(&mut self, site: ThreadgroupSite) {
        let same = |s: &&mut ThreadgroupSite| s.msl_line == site.msl_line && s.store == site.store;
        match self.threadgroup_sites.iter_mut().find(same) {
            Some(s) => {
                s.instructions += site.instructions;
                s.wavefronts += site.wavefronts;
                s.min_wavefronts += site.min_wavefronts;
            }
            None => self.threadgroup_sites.push(site),
        }
    }

    fn sort_sites(&mut self) {
        self.threadgroup_sites
            .sort_by_key(|s| (std::cmp::Reverse(s.wavefronts), s.msl_line, s.store));
    }

    /// Sets the sites from the raw counts of a launch, each pair of return
    /// addresses (site, caller) mapped to its MSL line by `line_of`.
    pub(crate) fn set_sites(&mut self, raw: &RawSites, line_of: impl Fn(&[[usize; 2]]) -> Vec<Option<u32>>) {
        let chains: Vec<[usize; 2]> = raw
            .keys()
            .map(|&(site, caller, _)| [site as usize, caller as usize])
            .collect();
        let lines = line_of(&chains);
        self.threadgroup_sites.clear();
        for ((&(_, _, store), counts), msl_line) in raw.iter().zip(lines) {
            self.add_site(ThreadgroupSite {
                msl_line,
                store,
                instructions: counts[0],
                wavefronts: counts[1],
                min_wavefronts: counts[2],
            });
        }
        self.sort_sites();
    }
}

/// Per (return address, its caller's, store): instructions, wavefronts,
/// minimum wavefronts.
pub(crate) type RawSites = std::collections::BTreeMap<(u64, u64, bool), [u64; 3]>;

/// Mirrors `ProfileAccess` in profile.h.
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct ProfileAccess {
    address: u64,
    second: i32,
    bytes: u16,
    flags: u8,
    pad: u8,
    site: u64,
    caller: u64,
}

/// Mirrors `ProfileSite` in profile.h.
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct ProfileSite {
    site: u64,
    caller: u64,
    instructions: u64,
    wavefronts: u64,
    min_wavefronts: u64,
    write: u32,
    used: u32,
}

/// Mirrors `ProfileWordSlot` in profile.h.
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct WordSlot {
    word: u32,
    stamp: u32,
}

/// Mirrors `ProfileState` in profile.h.
#[repr(C)]
pub(crate) struct ProfileState {
    counters: [u64; COUNTER_COUNT],
    log: *mut ProfileAccess,
    log_length: *mut u32,
    words: *mut WordSlot,
    sites: *mut ProfileSite,
    log_capacity: u32,
    word_capacity: u32,
    stamp: u32,
    mute: u32,
    site_capacity: u32,
    sites_used: u32,
    bank_words: [u32; 32],
    threadgroup_base: u64,
}

/// Log entries per worker, shared by the threads of a group (32 bytes each:
/// 8 MiB). A group of 128 threads logs 2048 accesses per thread between
/// synchronisation points, one of 1024 threads 256.
const LOG_ENTRIES: usize = 1 << 18;
/// Slots of the word set: an instruction's analysis holds half as many words.
const WORD_SLOTS: usize = 1 << 13;
/// Slots of the site table: 511 sites and their directions are told apart.
const SITE_SLOTS: usize = 1 << 10;

/// One worker's profile state and the memory it points into.
struct ProfileBuffers {
    state: Box<ProfileState>,
    log: Vec<ProfileAccess>,
    lengths: Vec<u32>,
    words: Vec<WordSlot>,
    sites: Vec<ProfileSite>,
}

impl ProfileBuffers {
    fn new() -> Self {
        let mut log = vec![ProfileAccess::default(); LOG_ENTRIES];
        let mut lengths = vec![0u32; super::MAX_THREADS_PER_GROUP as usize];
        let mut words = vec![WordSlot::default(); WORD_SLOTS];
        let mut sites = vec![ProfileSite::default(); SITE_SLOTS];
        let state = Box::new(ProfileState {
            counters: [0; COUNTER_COUNT],
            log: log.as_mut_ptr(),
            log_length: lengths.as_mut_ptr(),
            words: words.as_mut_ptr(),
            sites: sites.as_mut_ptr(),
            log_capacity: 0,
            word_capacity: WORD_SLOTS as u32,
            stamp: 0,
            mute: 0,
            site_capacity: SITE_SLOTS as u32,
            sites_used: 0,
            bank_words: [0; 32],
            threadgroup_base: 0,
        });
        ProfileBuffers {
            state,
            log,
            lengths,
            words,
            sites,
        }
    }

    /// Adds the group's site table to `raw`.
    fn collect_sites(&self, raw: &mut RawSites) {
        for site in self.sites.iter().filter(|s| s.used != 0) {
            let counts = raw.entry((site.site, site.caller, site.write != 0)).or_default();
            counts[0] += site.instructions;
            counts[1] += site.wavefronts;
            counts[2] += site.min_wavefronts;
        }
    }

    /// Ready for a group of `threads` threads: counters and logs empty.
    fn reset(&mut self, threads: usize) -> *mut ProfileState {
        self.lengths.fill(0);
        self.sites.fill(ProfileSite::default());
        let state = &mut *self.state;
        state.counters = [0; COUNTER_COUNT];
        state.log = self.log.as_mut_ptr();
        state.log_length = self.lengths.as_mut_ptr();
        state.words = self.words.as_mut_ptr();
        state.sites = self.sites.as_mut_ptr();
        state.log_capacity = (LOG_ENTRIES / threads.max(1)) as u32;
        state.mute = 0;
        state.sites_used = 0;
        state
    }
}

thread_local! {
    static PROFILE_BUFFERS: RefCell<Option<ProfileBuffers>> = const { RefCell::new(None) };
}

/// Runs `f` with this worker's profile state, emptied for a group of
/// `threads` threads, and returns its result with the counts the group made
/// (its sites added to `sites`).
pub(crate) fn with_profile_state<R>(
    threads: usize,
    sites: &mut RawSites,
    f: impl FnOnce(*mut ProfileState) -> Result<R, EmuError>,
) -> Result<(R, EmuProfile), EmuError> {
    PROFILE_BUFFERS.with(|cell| {
        let mut slot = cell
            .try_borrow_mut()
            .map_err(|_| EmuError::BadLaunch("re-entrant profiled launch on one worker thread".into()))?;
        let buffers = slot.get_or_insert_with(ProfileBuffers::new);
        let state = buffers.reset(threads);
        let result = f(state)?;
        buffers.collect_sites(sites);
        Ok((result, EmuProfile::from_counters(&buffers.state.counters)))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_round_trip_in_order() {
        let mut counters = [0u64; COUNTER_COUNT];
        for (i, c) in counters.iter_mut().enumerate() {
            *c = i as u64 + 1;
        }
        let profile = EmuProfile::from_counters(&counters);
        let fields = profile.fields();
        assert_eq!(fields.len(), COUNTER_COUNT);
        for (i, (name, value)) in fields.iter().enumerate() {
            assert_eq!(*name, COUNTER_NAMES[i]);
            assert_eq!(*value, i as u64 + 1);
        }
        assert_eq!(profile.threadgroup_loads, 1);
        assert_eq!(profile.threads, COUNTER_COUNT as u64);
        let mut twice = profile.clone();
        twice.add(&profile);
        assert_eq!(twice.threads, 2 * profile.threads);
    }

    #[test]
    fn ratios() {
        let profile = EmuProfile {
            threadgroup_load_instructions: 3,
            threadgroup_load_wavefronts: 6,
            threadgroup_store_instructions: 1,
            threadgroup_store_wavefronts: 2,
            threadgroup_min_wavefronts: 4,
            ..EmuProfile::default()
        };
        assert_eq!(profile.bank_conflict_ratio(), Some(2.0));
        assert_eq!(profile.bank_conflict_excess(), Some(2.0));
        assert_eq!(EmuProfile::default().bank_conflict_ratio(), None);
    }
}
