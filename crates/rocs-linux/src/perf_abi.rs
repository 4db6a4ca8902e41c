//! Numbers of the perf_event ABI (include/uapi/linux/perf_event.h) that rocs reads or
//! writes itself: sample-type bits, record types, read-format bits, software events.

// PERF_SAMPLE_* bits of perf_event_attr.sample_type.
pub const SAMPLE_IP: u64 = 1 << 0;
pub const SAMPLE_TID: u64 = 1 << 1;
pub const SAMPLE_TIME: u64 = 1 << 2;
pub const SAMPLE_ADDR: u64 = 1 << 3;
pub const SAMPLE_READ: u64 = 1 << 4;
pub const SAMPLE_CALLCHAIN: u64 = 1 << 5;
pub const SAMPLE_ID: u64 = 1 << 6;
pub const SAMPLE_CPU: u64 = 1 << 7;
pub const SAMPLE_PERIOD: u64 = 1 << 8;
pub const SAMPLE_STREAM_ID: u64 = 1 << 9;
pub const SAMPLE_RAW: u64 = 1 << 10;
pub const SAMPLE_BRANCH_STACK: u64 = 1 << 11;
pub const SAMPLE_REGS_USER: u64 = 1 << 12;
pub const SAMPLE_STACK_USER: u64 = 1 << 13;
pub const SAMPLE_WEIGHT: u64 = 1 << 14;
pub const SAMPLE_DATA_SRC: u64 = 1 << 15;
pub const SAMPLE_IDENTIFIER: u64 = 1 << 16;
pub const SAMPLE_TRANSACTION: u64 = 1 << 17;
pub const SAMPLE_REGS_INTR: u64 = 1 << 18;
pub const SAMPLE_PHYS_ADDR: u64 = 1 << 19;
pub const SAMPLE_AUX: u64 = 1 << 20;
pub const SAMPLE_CGROUP: u64 = 1 << 21;
pub const SAMPLE_DATA_PAGE_SIZE: u64 = 1 << 22;
pub const SAMPLE_CODE_PAGE_SIZE: u64 = 1 << 23;
pub const SAMPLE_WEIGHT_STRUCT: u64 = 1 << 24;
/// Every bit this parser knows how to skip or read.
pub const SAMPLE_KNOWN: u64 = (1 << 25) - 1;

// PERF_FORMAT_* bits of read_format.
pub const FORMAT_TOTAL_TIME_ENABLED: u64 = 1 << 0;
pub const FORMAT_TOTAL_TIME_RUNNING: u64 = 1 << 1;
pub const FORMAT_ID: u64 = 1 << 2;
pub const FORMAT_GROUP: u64 = 1 << 3;
pub const FORMAT_LOST: u64 = 1 << 4;

// PERF_RECORD_* types.
pub const RECORD_MMAP: u32 = 1;
pub const RECORD_LOST: u32 = 2;
pub const RECORD_COMM: u32 = 3;
pub const RECORD_EXIT: u32 = 4;
pub const RECORD_THROTTLE: u32 = 5;
pub const RECORD_UNTHROTTLE: u32 = 6;
pub const RECORD_FORK: u32 = 7;
pub const RECORD_SAMPLE: u32 = 9;
pub const RECORD_AUX: u32 = 11;
pub const RECORD_LOST_SAMPLES: u32 = 13;
// perf tool's own records (in perf.data only).
pub const RECORD_HEADER_ATTR: u32 = 64;
pub const RECORD_AUXTRACE: u32 = 71;
pub const RECORD_COMPRESSED: u32 = 81;
pub const RECORD_COMPRESSED2: u32 = 83;

// perf_event_attr.type values.
pub const TYPE_HARDWARE: u32 = 0;
pub const TYPE_SOFTWARE: u32 = 1;
pub const TYPE_RAW: u32 = 4;

// Generic hardware events (PERF_TYPE_HARDWARE configs).
pub const HW_CPU_CYCLES: u64 = 0;
pub const HW_INSTRUCTIONS: u64 = 1;
pub const HW_CACHE_REFERENCES: u64 = 2;
pub const HW_CACHE_MISSES: u64 = 3;

// Software events (PERF_TYPE_SOFTWARE configs).
pub const SW_CPU_CLOCK: u64 = 0;
pub const SW_TASK_CLOCK: u64 = 1;
pub const SW_PAGE_FAULTS: u64 = 2;
pub const SW_CONTEXT_SWITCHES: u64 = 3;
pub const SW_DUMMY: u64 = 9;

// Bits of perf_event_attr's flag word (the bitfield after read_format).
pub const ATTR_FLAG_INHERIT: u64 = 1 << 1;
pub const ATTR_FLAG_SAMPLE_ID_ALL: u64 = 1 << 18;
pub const ATTR_PRECISE_IP_SHIFT: u32 = 15;

/// Branch-sample flag that adds a hw_idx word to each branch stack.
pub const BRANCH_SAMPLE_HW_INDEX: u64 = 1 << 17;
/// Branch-sample flag that adds per-branch counters.
pub const BRANCH_SAMPLE_COUNTERS: u64 = 1 << 19;

// ioctls on a perf fd (generic _IO/_IOW encoding, same on x86-64 and arm64).
pub const IOC_SET_OUTPUT: libc::c_ulong = 0x2405;
pub const IOC_PERIOD: libc::c_ulong = 0x4008_2404;
