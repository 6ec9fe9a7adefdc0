// tolaria's emulated CUDA driver: a libcuda.so.1 that runs the driver calls
// tolaria makes on the host, so that device/cuda executes on machines without
// a GPU. docs/cuda.md lists its rules and the documented driver behaviour
// each one follows. Memory lives in host RAM (device pointers are host
// addresses of mapped blocks), every stream is a host thread running its
// work in order, kernels are the C++ builds of kernels.cpp, and stream
// capture records work into graphs instead of running it.
#include <cuda.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cerrno>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "kernels.h"

#define EXPORT extern "C" __attribute__((visibility("default")))

namespace {

using Clock = std::chrono::steady_clock;

void note(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    std::fprintf(stderr, "cuda emulator: ");
    std::vfprintf(stderr, fmt, ap);
    std::fprintf(stderr, "\n");
    va_end(ap);
}

// ---- fault injection -------------------------------------------------------

// Faults reads CUDAEMU_FAULTS, a comma-separated list of
// SYMBOL:N:CODE: the Nth call (counting from 1) of SYMBOL returns CODE
// without doing anything. N may be "*" for every call.
struct Faults {
    struct Rule {
        long nth;  // 0: every call
        int code;
    };
    std::mutex mu;
    std::unordered_map<std::string, std::vector<Rule>> rules;
    std::unordered_map<std::string, long> calls;
    bool any = false;

    Faults() {
        if (const char *t = std::getenv("CUDAEMU_TRACE")) trace = t;
        const char *env = std::getenv("CUDAEMU_FAULTS");
        if (!env || !*env) return;
        std::string s(env);
        size_t pos = 0;
        while (pos <= s.size()) {
            size_t end = s.find(',', pos);
            if (end == std::string::npos) end = s.size();
            std::string item = s.substr(pos, end - pos);
            pos = end + 1;
            if (item.empty()) continue;
            size_t a = item.find(':'), b = item.rfind(':');
            if (a == std::string::npos || a == b) {
                note("CUDAEMU_FAULTS: %s is not SYMBOL:N:CODE; ignoring the variable", item.c_str());
                rules.clear();
                return;
            }
            std::string nth = item.substr(a + 1, b - a - 1);
            rules[item.substr(0, a)].push_back(Rule{nth == "*" ? 0 : std::atol(nth.c_str()), std::atoi(item.c_str() + b + 1)});
            any = true;
        }
    }

    // sticky is the error an injected fault left the context in: cuda.h
    // says of these codes that "any further CUDA work will return the same
    // error" and the process must be restarted.
    std::atomic<int> sticky{0};

    static bool isSticky(int code) {
        switch (code) {
        case CUDA_ERROR_ILLEGAL_ADDRESS:
        case CUDA_ERROR_LAUNCH_FAILED:
        case CUDA_ERROR_MISALIGNED_ADDRESS:
        case CUDA_ERROR_ILLEGAL_INSTRUCTION:
        case CUDA_ERROR_INVALID_ADDRESS_SPACE:
        case CUDA_ERROR_INVALID_PC:
        case CUDA_ERROR_HARDWARE_STACK_ERROR:
        case CUDA_ERROR_LAUNCH_TIMEOUT:
        case CUDA_ERROR_ECC_UNCORRECTABLE:
            return true;
        }
        return false;
    }

    // trace is CUDAEMU_TRACE: a file to which each process appends the
    // name of every entry point at its first call, so a test can list the
    // entry points a run reaches (and inject a fault into each).
    std::string trace;
    std::unordered_map<std::string, bool> traced;

    void traceCall(const char *sym) {
        std::lock_guard<std::mutex> l(mu);
        if (traced[sym]) return;
        traced[sym] = true;
        if (FILE *f = std::fopen(trace.c_str(), "a")) {
            std::fprintf(f, "%s\n", sym);
            std::fclose(f);
        }
    }

    CUresult check(const char *sym) {
        if (!trace.empty()) traceCall(sym);
        if (!any) return CUDA_SUCCESS;
        std::lock_guard<std::mutex> l(mu);
        auto it = rules.find(sym);
        if (it == rules.end()) return CUDA_SUCCESS;
        long n = ++calls[sym];
        for (auto &r : it->second)
            if (r.nth == 0 || r.nth == n) {
                if (isSticky(r.code)) sticky = r.code;
                return CUresult(r.code);
            }
        return CUDA_SUCCESS;
    }
};

Faults &faults() {
    static Faults f;
    return f;
}

#define FAULT(sym)                                              \
    do {                                                        \
        if (CUresult fault_ = faults().check(sym)) return fault_; \
    } while (0)

// ---- memory ---------------------------------------------------------------

struct Block {
    size_t bytes;
    uintptr_t mapBase;  // the mapping: the block ends just below a guard page
    size_t mapBytes;
    bool pinned;  // cuMemAllocHost
    bool freed;
    int ordinal;  // the device (ordinal) a device block was allocated on
};

// Memory is every block handed out, device and pinned, by address. A freed
// block is poisoned (every byte 0xFF: a float NaN) and kept mapped in a
// quarantine, so that late use reads NaN instead of another block's data.
// How many bytes each device has in use is the Driver's bill, not kept here.
struct Memory {
    std::mutex mu;
    std::map<uintptr_t, Block> blocks;
    std::deque<uintptr_t> quarantine;
    size_t quarantined = 0;
    static constexpr size_t kQuarantineBytes = 256u << 20;

    // alloc maps a block whose end (rounded up to 256 bytes, the driver's
    // alignment) touches an inaccessible guard page, so that a kernel
    // writing past a buffer faults at once instead of corrupting memory.
    void *alloc(size_t bytes, bool pinned, int ordinal = -1) {
        const size_t page = 4096, rounded = (bytes + 255) & ~size_t(255);
        const size_t data = (rounded + page - 1) & ~(page - 1), total = data + page;
        void *m = mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (m == MAP_FAILED) return nullptr;
        mprotect(static_cast<char *>(m) + data, page, PROT_NONE);
        uintptr_t p = uintptr_t(m) + (data - rounded);
        std::lock_guard<std::mutex> l(mu);
        blocks[p] = Block{bytes, uintptr_t(m), total, pinned, false, ordinal};
        return reinterpret_cast<void *>(p);
    }

    // release poisons and quarantines the block starting exactly at p, and
    // says how many bytes it held on which device (ordinal).
    CUresult release(uintptr_t p, bool pinned, size_t *bytes = nullptr, int *ordinal = nullptr) {
        std::lock_guard<std::mutex> l(mu);
        auto it = blocks.find(p);
        if (it == blocks.end() || it->second.freed || it->second.pinned != pinned) return CUDA_ERROR_INVALID_VALUE;
        std::memset(reinterpret_cast<void *>(p), 0xFF, it->second.bytes);
        it->second.freed = true;
        if (bytes) *bytes = it->second.bytes;
        if (ordinal) *ordinal = it->second.ordinal;
        quarantine.push_back(p);
        quarantined += it->second.bytes;
        while (quarantined > kQuarantineBytes && quarantine.size() > 1) {
            auto old = blocks.find(quarantine.front());
            quarantine.pop_front();
            quarantined -= old->second.bytes;
            munmap(reinterpret_cast<void *>(old->second.mapBase), old->second.mapBytes);
            blocks.erase(old);
        }
        return CUDA_SUCCESS;
    }

    // find returns the block holding p, or nullptr.
    const Block *find(uintptr_t p, uintptr_t *base) {
        auto it = blocks.upper_bound(p);
        if (it == blocks.begin()) return nullptr;
        --it;
        if (p >= it->first + it->second.bytes) return nullptr;
        *base = it->first;
        return &it->second;
    }

    // device checks that [p, p+n) lies in one live device block.
    bool device(uintptr_t p, size_t n) {
        std::lock_guard<std::mutex> l(mu);
        uintptr_t base;
        const Block *b = find(p, &base);
        return b && !b->pinned && !b->freed && p + n <= base + b->bytes;
    }

    // host classifies a host range: 1 pinned and in bounds, 0 pageable,
    // -1 overrunning or freed pinned memory, or device memory.
    int host(uintptr_t p, size_t n) {
        std::lock_guard<std::mutex> l(mu);
        uintptr_t base;
        const Block *b = find(p, &base);
        if (!b) return 0;
        if (!b->pinned || b->freed || p + n > base + b->bytes) return -1;
        return 1;
    }
};

// ---- sizes ----------------------------------------------------------------------

// parseBytes reads a size in bytes: digits, optionally followed by K, M, G
// or T (binary multiples, 1024^n; "KiB", "MiB", ... are accepted too).
bool parseBytes(const std::string &text, size_t *out) {
    size_t i = 0;
    unsigned long long v = 0;
    while (i < text.size() && text[i] >= '0' && text[i] <= '9') {
        unsigned long long next = v * 10 + unsigned(text[i] - '0');
        if (next / 10 != v) return false;
        v = next;
        ++i;
    }
    if (i == 0) return false;
    std::string unit = text.substr(i);
    int shift = 0;
    if (!unit.empty()) {
        switch (unit[0]) {
        case 'K': shift = 10; break;
        case 'M': shift = 20; break;
        case 'G': shift = 30; break;
        case 'T': shift = 40; break;
        default: return false;
        }
        std::string rest = unit.substr(1);
        if (!rest.empty() && rest != "iB" && rest != "B") return false;
    }
    if (shift && (v << shift) >> shift != v) return false;
    *out = size_t(v << shift);
    return true;
}

// deviceSizes reads CUDAEMU_MEMORY for a machine of n devices: one size for
// every device, or a comma-separated list, one per device in the machine's
// order; devices past the end of a shorter list take its last size. A
// malformed value is noted on stderr and ignored (every device keeps the
// default, 16 GiB), as CUDAEMU_FAULTS does with a malformed rule.
std::vector<size_t> deviceSizes(const char *env, int n) {
    const size_t fallback = size_t(16) << 30;
    std::vector<size_t> sizes;
    if (env && *env) {
        std::string v(env);
        size_t at = 0;
        for (;;) {
            size_t end = v.find(',', at);
            if (end == std::string::npos) end = v.size();
            size_t b;
            if (!parseBytes(v.substr(at, end - at), &b)) {
                note("CUDAEMU_MEMORY: %s is not a size in bytes (optionally with K, M, G or T) or a comma-separated "
                     "list of them; every device has 16 GiB",
                     env);
                sizes.clear();
                break;
            }
            sizes.push_back(b);
            if (end == v.size()) break;
            at = end + 1;
        }
    }
    if (sizes.empty()) sizes.push_back(fallback);
    while (int(sizes.size()) < n) sizes.push_back(sizes.back());
    return sizes;
}

// ---- devices shared across processes ------------------------------------------

// ProcStat is what /proc/PID/stat says of a process: its state letter and
// its start time (clock ticks after boot), which tells a process from a
// later one given the same pid.
struct ProcStat {
    char state = '?';
    unsigned long long start = 0;
};

bool readProcStat(long pid, ProcStat *st) {
    char path[64];
    std::snprintf(path, sizeof path, "/proc/%ld/stat", pid);
    FILE *f = std::fopen(path, "r");
    if (!f) return false;
    char buf[1024];
    size_t n = std::fread(buf, 1, sizeof buf - 1, f);
    std::fclose(f);
    buf[n] = 0;
    // "pid (comm) state ppid ...": comm may hold spaces and parentheses,
    // so the fields are counted from the last ')'. starttime is field 22.
    const char *p = std::strrchr(buf, ')');
    if (!p || p[1] != ' ') return false;
    st->state = p[2];
    p += 2;
    for (int field = 3; field < 22; ++field) {
        p = std::strchr(p, ' ');
        if (!p) return false;
        ++p;
    }
    st->start = std::strtoull(p, nullptr, 10);
    return true;
}

// processAlive says whether the process recorded as pid with start time
// start still runs. A zombie (killed, not yet reaped) does not: a GPU's
// memory is freed when its process dies, whether or not its parent has
// waited for it yet.
bool processAlive(long pid, unsigned long long start) {
    ProcStat st;
    if (readProcStat(pid, &st)) return st.state != 'Z' && st.state != 'X' && (start == 0 || st.start == start);
    return ::kill(pid_t(pid), 0) == 0 || errno == EPERM;
}

// Ledger keeps, with CUDAEMU_STATE=DIR, each physical device's memory in use
// by every process in DIR, so that processes placed on one emulated device
// share its memory as they share a GPU's. For each physical device N:
//
//   DIR/device-N.state  the device's record (format below), replaced
//                       atomically (written beside, then renamed), so a
//                       reader needs no lock
//   DIR/device-N.lock   flock(2)ed by a process while it reads and
//                       rewrites the record; the kernel drops the lock of a
//                       process that dies holding it
//
// The record, one line each (device/cuda/emulator/emurecord parses it):
//
//   # tolaria emulated CUDA device, CUDAEMU_STATE format 1
//   device N total BYTES peak BYTES
//   process PID start TICKS parent PPID context BYTES in_use BYTES peak BYTES alive|gone
//
// total is the device's size (CUDAEMU_MEMORY of the last process that wrote
// the record); the device's peak is the most bytes in use at once, all
// processes together. A process line is added when the process first
// retains the device's primary context and kept after it ends; its in_use
// counts its allocations plus its context's bill (context), and its peak is
// its highest in_use. Each write first checks every process line: one
// whose process has died (no longer in /proc, a zombie, or its pid now
// another process's: start is /proc/PID/stat's starttime) is marked gone
// and its in_use and context set to 0, so a process killed by SIGKILL
// leaks nothing beyond the next write. "alive" is as of the last write.
class Ledger {
  public:
    struct Proc {
        long pid = 0;
        unsigned long long start = 0;
        long parent = 0;
        size_t context = 0, inUse = 0, peak = 0;
        bool alive = true;
    };
    struct Record {
        size_t total = 0, peak = 0;
        std::vector<Proc> procs;
    };

    void open(const std::string &dir) {
        dir_ = dir;
        ::mkdir(dir.c_str(), 0777);  // one level; an existing directory is fine
        self_.pid = long(::getpid());
        self_.parent = long(::getppid());
        ProcStat st;
        if (readProcStat(self_.pid, &st)) self_.start = st.start;
    }
    bool on() const { return !dir_.empty(); }

    // set records that this process now has inUse bytes (its context's bill
    // included) on physical device phys of size total. When grow is set
    // and the processes' use together would exceed total, nothing changes
    // and CUDA_ERROR_OUT_OF_MEMORY is returned.
    CUresult set(int phys, size_t total, size_t inUse, size_t context, bool grow) {
        std::lock_guard<std::mutex> l(mu_);
        int lock = lockDevice(phys, LOCK_EX);
        if (lock < 0) return CUDA_ERROR_OPERATING_SYSTEM;
        Record rec;
        CUresult r = read(phys, &rec);
        if (r == CUDA_SUCCESS) {
            if (rec.total && rec.total != total && !warnedTotal_) {
                warnedTotal_ = true;
                note("CUDAEMU_STATE: device %d has %zu bytes in %s but %zu here; processes sharing the directory must "
                     "agree on CUDAEMU_MEMORY",
                     phys, rec.total, path(phys, ".state").c_str(), total);
            }
            size_t others = reap(&rec);
            if (grow && (inUse > total || others > total - inUse)) {
                r = CUDA_ERROR_OUT_OF_MEMORY;
            } else {
                Proc *me = mine(&rec);
                me->inUse = inUse;
                me->context = context;
                me->peak = std::max(me->peak, inUse);
                me->alive = true;
                rec.total = total;
                rec.peak = std::max(rec.peak, others + inUse);
                r = write(phys, rec);
            }
        }
        ::close(lock);
        return r;
    }

    // used is the bytes all live processes have in use on physical device phys.
    CUresult used(int phys, size_t *out) {
        std::lock_guard<std::mutex> l(mu_);
        int lock = lockDevice(phys, LOCK_SH);
        if (lock < 0) return CUDA_ERROR_OPERATING_SYSTEM;
        Record rec;
        CUresult r = read(phys, &rec);
        ::close(lock);
        if (r) return r;
        size_t sum = 0;
        for (const Proc &p : rec.procs)
            if (p.alive && (same(p, self_) || processAlive(p.pid, p.start))) sum += p.inUse;
        *out = sum;
        return CUDA_SUCCESS;
    }

    // live lists the live processes on physical device phys with the bytes
    // each has in use (its context's bill included), for the NVML-shaped
    // query (nvmlDeviceGetComputeRunningProcesses below).
    CUresult live(int phys, std::vector<Proc> *out) {
        std::lock_guard<std::mutex> l(mu_);
        int lock = lockDevice(phys, LOCK_SH);
        if (lock < 0) return CUDA_ERROR_OPERATING_SYSTEM;
        Record rec;
        CUresult r = read(phys, &rec);
        ::close(lock);
        if (r) return r;
        out->clear();
        for (const Proc &p : rec.procs)
            if (p.alive && (same(p, self_) || processAlive(p.pid, p.start))) out->push_back(p);
        return CUDA_SUCCESS;
    }

  private:
    std::string path(int phys, const char *ext) const { return dir_ + "/device-" + std::to_string(phys) + ext; }

    static bool same(const Proc &a, const Proc &b) { return a.pid == b.pid && a.start == b.start; }

    int lockDevice(int phys, int how) {
        std::string p = path(phys, ".lock");
        int fd = ::open(p.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0666);
        if (fd < 0) {
            note("CUDAEMU_STATE: cannot open %s: %s", p.c_str(), std::strerror(errno));
            return -1;
        }
        while (::flock(fd, how) != 0) {
            if (errno == EINTR) continue;
            note("CUDAEMU_STATE: cannot lock %s: %s", p.c_str(), std::strerror(errno));
            ::close(fd);
            return -1;
        }
        return fd;
    }

    CUresult read(int phys, Record *rec) {
        std::string p = path(phys, ".state");
        FILE *f = std::fopen(p.c_str(), "r");
        if (!f) {
            if (errno == ENOENT) return CUDA_SUCCESS;
            note("CUDAEMU_STATE: cannot read %s: %s", p.c_str(), std::strerror(errno));
            return CUDA_ERROR_OPERATING_SYSTEM;
        }
        char line[512];
        bool ok = true;
        while (ok && std::fgets(line, sizeof line, f)) {
            if (line[0] == '#' || line[0] == '\n') continue;
            int dev;
            unsigned long long total, peak, start, ctx, use, ppeak;
            long pid, parent;
            char state[16];
            if (std::sscanf(line, "device %d total %llu peak %llu", &dev, &total, &peak) == 3) {
                rec->total = size_t(total);
                rec->peak = size_t(peak);
            } else if (std::sscanf(line, "process %ld start %llu parent %ld context %llu in_use %llu peak %llu %15s", &pid,
                                   &start, &parent, &ctx, &use, &ppeak, state) == 7) {
                Proc pr;
                pr.pid = pid;
                pr.start = start;
                pr.parent = parent;
                pr.context = size_t(ctx);
                pr.inUse = size_t(use);
                pr.peak = size_t(ppeak);
                pr.alive = std::strcmp(state, "alive") == 0;
                rec->procs.push_back(pr);
            } else {
                ok = false;
            }
        }
        std::fclose(f);
        if (!ok) {
            note("CUDAEMU_STATE: %s is not a device record of this emulator", p.c_str());
            return CUDA_ERROR_OPERATING_SYSTEM;
        }
        return CUDA_SUCCESS;
    }

    // reap marks the processes that died gone and returns the bytes the
    // other live processes have in use.
    size_t reap(Record *rec) {
        size_t others = 0;
        for (Proc &p : rec->procs) {
            if (same(p, self_)) continue;
            if (p.alive && !processAlive(p.pid, p.start)) {
                p.alive = false;
                p.inUse = 0;
                p.context = 0;
            }
            if (p.alive) others += p.inUse;
        }
        return others;
    }

    Proc *mine(Record *rec) {
        for (Proc &p : rec->procs)
            if (same(p, self_)) return &p;
        rec->procs.push_back(self_);
        return &rec->procs.back();
    }

    CUresult write(int phys, const Record &rec) {
        std::string p = path(phys, ".state"), tmp = p + ".tmp" + std::to_string(self_.pid);
        FILE *f = std::fopen(tmp.c_str(), "w");
        if (!f) {
            note("CUDAEMU_STATE: cannot write %s: %s", tmp.c_str(), std::strerror(errno));
            return CUDA_ERROR_OPERATING_SYSTEM;
        }
        std::fprintf(f, "# tolaria emulated CUDA device, CUDAEMU_STATE format 1\n");
        std::fprintf(f, "device %d total %zu peak %zu\n", phys, rec.total, rec.peak);
        for (const Proc &pr : rec.procs)
            std::fprintf(f, "process %ld start %llu parent %ld context %zu in_use %zu peak %zu %s\n", pr.pid, pr.start,
                         pr.parent, pr.context, pr.inUse, pr.peak, pr.alive ? "alive" : "gone");
        bool ok = std::fflush(f) == 0;
        ok = std::fclose(f) == 0 && ok;
        if (!ok || std::rename(tmp.c_str(), p.c_str()) != 0) {
            note("CUDAEMU_STATE: cannot replace %s: %s", p.c_str(), std::strerror(errno));
            std::remove(tmp.c_str());
            return CUDA_ERROR_OPERATING_SYSTEM;
        }
        return CUDA_SUCCESS;
    }

    std::mutex mu_;  // one transaction of this process at a time
    std::string dir_;
    Proc self_;
    bool warnedTotal_ = false;
};

// ---- streams, events, captures, graphs ------------------------------------

struct Stream;
struct Capture;
struct Function;

enum NodeKind { kKernel, kMemcpy, kMemset, kEmpty };

// Node is one captured operation. Its run function holds everything it
// needs (the kernel parameters are copied at launch, as the driver does).
struct Node {
    explicit Node(NodeKind k) : kind(k) {}
    NodeKind kind;
    std::vector<size_t> deps;  // indices of earlier nodes
    const Function *fn = nullptr;
    unsigned grid[3] = {1, 1, 1}, block[3] = {1, 1, 1};
    std::vector<uint64_t> params;  // one 8-byte slot per parameter
    uintptr_t dst = 0, src = 0;
    size_t bytes = 0;
    int copyKind = 0;  // 0 DtoD, 1 HtoD, 2 DtoH
    uint32_t value = 0;
};

struct Graph {
    std::vector<Node> nodes;
};

struct Capture {
    CUstreamCaptureMode mode;
    std::thread::id thread;
    Stream *origin;
    bool invalidated = false;
    CUresult why = CUDA_SUCCESS;
    std::unique_ptr<Graph> graph{new Graph};
    std::set<Stream *> streams;  // the origin and every stream that joined
    unsigned long long id;
};

struct Stream {
    bool legacy = false;
    unsigned flags = 0;
    std::mutex mu;
    std::condition_variable cv;
    std::deque<std::function<void()>> queue;
    uint64_t enqueued = 0, done = 0;
    bool stopping = false;
    std::thread worker;
    // Capture state, guarded by the driver lock.
    Capture *capture = nullptr;
    std::vector<size_t> tail;  // the nodes the next captured operation depends on

    void start() {
        worker = std::thread([this] { loop(); });
    }

    void loop() {
        std::unique_lock<std::mutex> l(mu);
        for (;;) {
            cv.wait(l, [this] { return !queue.empty() || stopping; });
            if (queue.empty()) return;
            auto f = std::move(queue.front());
            l.unlock();
            f();
            l.lock();
            queue.pop_front();
            ++done;
            cv.notify_all();
        }
    }

    uint64_t push(std::function<void()> f) {
        std::lock_guard<std::mutex> l(mu);
        queue.push_back(std::move(f));
        cv.notify_all();
        return ++enqueued;
    }

    uint64_t ticket() {
        std::lock_guard<std::mutex> l(mu);
        return enqueued;
    }

    bool reached(uint64_t t) {
        std::lock_guard<std::mutex> l(mu);
        return done >= t;
    }

    void waitFor(uint64_t t) {
        std::unique_lock<std::mutex> l(mu);
        cv.wait(l, [&] { return done >= t; });
    }

    void stop() {
        {
            std::lock_guard<std::mutex> l(mu);
            stopping = true;
            cv.notify_all();
        }
        if (worker.joinable()) worker.join();
    }
};

// Stamp is the host time at which a recorded event completed.
struct Stamp {
    std::atomic<bool> set{false};
    Clock::time_point at;
};

struct Event {
    unsigned flags;
    bool recorded = false;
    Stream *stream = nullptr;
    uint64_t ticket = 0;
    std::shared_ptr<Stamp> stamp;
    // The capture its latest record is in, and the nodes it stands for.
    Capture *capture = nullptr;
    unsigned long long captureId = 0;
    std::vector<size_t> nodes;
};

struct Function {
    const emu::KernelBuild *build;
    std::string name;
    std::vector<size_t> sizes;  // from the PTX .param list
    unsigned maxThreads = 1024;  // .maxntid, or the device limit
};

struct Module {
    std::vector<std::unique_ptr<Function>> functions;
};

// Exec is an instantiated graph. Launches take a snapshot of its nodes, so an
// update never changes a launch already enqueued.
struct Exec {
    std::shared_ptr<const std::vector<Node>> nodes;
    Stream *lastStream = nullptr;
    uint64_t lastTicket = 0;
};

// Context is a device's primary context, the only kind emulated.
struct Context {
    int refs = 0;
    int ordinal = 0;  // its device
};

// Driver is the whole emulated driver's state. mu guards the handle tables
// and the capture state; streams have their own locks for their queues.
// visibleDevices applies CUDA_VISIBLE_DEVICES to a machine of n devices as
// the CUDA programming guide describes it: only the devices whose index is
// in the comma-separated list are visible, numbered in the list's order;
// the list ends at the first entry that is not a device index here (out of
// range, repeated, or not a number: GPU UUIDs are not emulated). Unset,
// every device is visible in its own order; set but empty, none is.
std::vector<int> visibleDevices(const char *list, int n) {
    std::vector<int> out;
    if (!list) {
        for (int i = 0; i < n; ++i) out.push_back(i);
        return out;
    }
    std::string v(list);
    size_t at = 0;
    while (at < v.size()) {
        size_t end = v.find(',', at);
        if (end == std::string::npos) end = v.size();
        std::string item = v.substr(at, end - at);
        char *stop = nullptr;
        long idx = std::strtol(item.c_str(), &stop, 10);
        if (item.empty() || stop == item.c_str() || idx < 0 || idx >= n ||
            std::find(out.begin(), out.end(), int(idx)) != out.end())
            break;
        out.push_back(int(idx));
        at = end + 1;
    }
    return out;
}

struct Driver {
    std::mutex mu;
    bool initialised = false;
    int devices = 1;
    std::vector<Context> primaries;  // by ordinal; never resized, so their addresses are the handles
    Memory memory;
    std::mutex kernelLock;  // one kernel runs at a time (its __shared__ are statics)
    Stream legacy;
    std::set<Stream *> streams;  // live created streams
    std::set<Event *> events;
    std::set<Module *> modules;
    std::set<Function *> functions;
    std::set<Graph *> graphs;
    std::set<Exec *> execs;
    std::vector<Capture *> captures;
    unsigned long long nextCapture = 1;

    // physical[i] is the machine's device behind ordinal i: CUDAEMU_DEVICES
    // devices (default 1), filtered and ordered by CUDA_VISIBLE_DEVICES.
    std::vector<int> physical;
    // sizes[n] is physical device n's memory (CUDAEMU_MEMORY).
    std::vector<size_t> sizes;
    // contextBytes is what a primary context is billed on its device while
    // retained (CUDAEMU_CONTEXT_BYTES).
    size_t contextBytes = 0;

    // The bill, by ordinal, guarded by billMu: the bytes this process's
    // device blocks hold, and its retained context's bill. With
    // CUDAEMU_STATE the ledger shares it with every process on the device.
    std::mutex billMu;
    std::vector<size_t> blockBytes, contextBilled;
    Ledger ledger;

    Driver() {
        int machine = 1;
        if (const char *d = std::getenv("CUDAEMU_DEVICES")) machine = std::atoi(d);
        physical = visibleDevices(std::getenv("CUDA_VISIBLE_DEVICES"), machine);
        devices = int(physical.size());
        sizes = deviceSizes(std::getenv("CUDAEMU_MEMORY"), machine);
        const char *state = std::getenv("CUDAEMU_STATE");
        if (state && *state) {
            ledger.open(state);
            contextBytes = kStateContextBytes;
        }
        if (const char *c = std::getenv("CUDAEMU_CONTEXT_BYTES")) {
            size_t b;
            if (parseBytes(c, &b))
                contextBytes = b;
            else
                note("CUDAEMU_CONTEXT_BYTES: %s is not a size in bytes (optionally with K, M, G or T); using %zu", c,
                     contextBytes);
        }
        primaries.resize(size_t(devices));
        for (int i = 0; i < devices; ++i) primaries[size_t(i)].ordinal = i;
        blockBytes.assign(size_t(devices), 0);
        contextBilled.assign(size_t(devices), 0);
        legacy.legacy = true;
        legacy.start();
    }

    // kStateContextBytes is a context's bill when CUDAEMU_STATE is set and
    // CUDAEMU_CONTEXT_BYTES is not: 256 MiB, the order of what a real
    // primary context holds on a data-centre GPU (a few hundred MiB).
    // Without CUDAEMU_STATE the default is 0, the accounting of old.
    static constexpr size_t kStateContextBytes = size_t(256) << 20;

    size_t memOf(int ordinal) const { return sizes[size_t(physical[size_t(ordinal)])]; }

    // context resolves a handle to one of the primary contexts, or nullptr.
    Context *context(CUcontext h) {
        for (Context &c : primaries)
            if (reinterpret_cast<CUcontext>(&c) == h) return &c;
        return nullptr;
    }

    // bill records that ordinal's blocks now hold blocks bytes and its
    // context is billed ctx bytes. When the bill grows past the device's
    // memory (all processes' use with CUDAEMU_STATE) nothing changes and
    // CUDA_ERROR_OUT_OF_MEMORY is returned, or CUDA_ERROR_OPERATING_SYSTEM
    // when the shared record cannot be read or written. A bill that does not
    // grow always takes effect here; a failure to share it is noted on
    // stderr by the ledger. Call with billMu held.
    CUresult bill(int ordinal, size_t blocks, size_t ctx) {
        size_t o = size_t(ordinal), total = memOf(ordinal);
        bool grow = blocks + ctx > blockBytes[o] + contextBilled[o];
        if (ledger.on()) {
            CUresult r = ledger.set(physical[o], total, blocks + ctx, ctx, grow);
            if (r && grow) return r;
        } else if (grow && (ctx > total || blocks > total - ctx)) {
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
        blockBytes[o] = blocks;
        contextBilled[o] = ctx;
        return CUDA_SUCCESS;
    }
};

Driver &drv() {
    static Driver *d = new Driver;  // never destroyed: stream threads may outlive static destructors
    return *d;
}

thread_local Context *currentCtx = nullptr;

CUresult needContext() {
    Driver &d = drv();
    if (!d.initialised) return CUDA_ERROR_NOT_INITIALIZED;
    if (!currentCtx || currentCtx->refs == 0) return CUDA_ERROR_INVALID_CONTEXT;
    if (int code = faults().sticky.load()) return CUresult(code);
    return CUDA_SUCCESS;
}

#define NEED_CONTEXT()                          \
    do {                                        \
        if (CUresult r_ = needContext()) return r_; \
    } while (0)

// resolveStream maps a handle to a stream: NULL and CU_STREAM_LEGACY are the
// legacy stream; the per-thread default stream is not emulated.
Stream *resolveStream(CUstream h, CUresult *r) {
    Driver &d = drv();
    *r = CUDA_SUCCESS;
    if (h == nullptr || h == CU_STREAM_LEGACY) return &d.legacy;
    auto *s = reinterpret_cast<Stream *>(h);
    if (h == CU_STREAM_PER_THREAD || !d.streams.count(s)) {
        *r = CUDA_ERROR_INVALID_HANDLE;
        return nullptr;
    }
    return s;
}

void invalidate(Capture *c, CUresult why) {
    if (!c->invalidated) {
        c->invalidated = true;
        c->why = why;
    }
}

// prohibited applies the capture modes to a potentially unsafe call made by
// the calling thread (cuStreamBeginCapture's documentation): it is
// prohibited while this thread has a capture not begun in relaxed mode, or
// any thread has one in global mode. Each capture that prohibits the call is
// invalidated. Call with the driver lock held.
bool prohibited() {
    Driver &d = drv();
    auto self = std::this_thread::get_id();
    bool hit = false;
    for (Capture *c : d.captures) {
        bool mine = c->thread == self && c->mode != CU_STREAM_CAPTURE_MODE_RELAXED;
        if (mine || c->mode == CU_STREAM_CAPTURE_MODE_GLOBAL) {
            invalidate(c, CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
            hit = true;
        }
    }
    return hit;
}

#define UNSAFE_CALL()                                                 \
    do {                                                              \
        std::lock_guard<std::mutex> l_(drv().mu);                     \
        if (prohibited()) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED; \
    } while (0)

// legacyDeps is the ordering the legacy stream imposes: work on it waits for
// every blocking stream, and work on a blocking stream waits for it.
// Returns the waits to run first on s. Call with the driver lock held.
std::vector<std::pair<Stream *, uint64_t>> legacyDeps(Stream *s) {
    Driver &d = drv();
    std::vector<std::pair<Stream *, uint64_t>> w;
    if (s->legacy) {
        for (Stream *o : d.streams)
            if (!(o->flags & CU_STREAM_NON_BLOCKING)) w.push_back({o, o->ticket()});
    } else if (!(s->flags & CU_STREAM_NON_BLOCKING)) {
        w.push_back({&d.legacy, d.legacy.ticket()});
    }
    return w;
}

// implicitConflict: work on the legacy stream while a blocking stream
// captures would make the capture depend on uncaptured work
// (CUDA_ERROR_STREAM_CAPTURE_IMPLICIT); the capture is invalidated.
bool implicitConflict(Stream *s) {
    Driver &d = drv();
    bool hit = false;
    for (Capture *c : d.captures)
        for (Stream *o : c->streams)
            if ((s->legacy && !(o->flags & CU_STREAM_NON_BLOCKING)) ||
                (!s->legacy && !(s->flags & CU_STREAM_NON_BLOCKING) && o->legacy)) {
                invalidate(c, CUDA_ERROR_STREAM_CAPTURE_IMPLICIT);
                hit = true;
            }
    return hit;
}

// submit enqueues run on s, or captures node when s is capturing. Call with
// the driver lock held. Returns the stream ticket of the enqueued work (0
// when captured).
CUresult submit(Stream *s, Node node, std::function<void()> run, uint64_t *ticket = nullptr) {
    if (Capture *c = s->capture) {
        if (c->invalidated) return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
        node.deps = s->tail;
        c->graph->nodes.push_back(std::move(node));
        s->tail = {c->graph->nodes.size() - 1};
        if (ticket) *ticket = 0;
        return CUDA_SUCCESS;
    }
    if (implicitConflict(s)) return CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
    for (auto &w : legacyDeps(s)) {
        Stream *o = w.first;
        uint64_t t = w.second;
        if (o != s) s->push([o, t] { o->waitFor(t); });
    }
    uint64_t t = s->push(std::move(run));
    if (ticket) *ticket = t;
    return CUDA_SUCCESS;
}

// syncAll waits until every stream has finished the work enqueued so far.
void syncAll() {
    Driver &d = drv();
    std::vector<std::pair<Stream *, uint64_t>> w;
    {
        std::lock_guard<std::mutex> l(d.mu);
        w.push_back({&d.legacy, d.legacy.ticket()});
        for (Stream *s : d.streams) w.push_back({s, s->ticket()});
    }
    for (auto &p : w) p.first->waitFor(p.second);
}

// ---- node execution ---------------------------------------------------------

void runKernel(const Function *fn, const unsigned grid[3], const unsigned block[3], const std::vector<uint64_t> &params) {
    std::vector<void *> args(params.size());
    for (size_t i = 0; i < params.size(); ++i) args[i] = const_cast<uint64_t *>(&params[i]);
    std::lock_guard<std::mutex> l(drv().kernelLock);
    emu::runGrid(*fn->build, dim3{grid[0], grid[1], grid[2]}, dim3{block[0], block[1], block[2]}, args.data());
}

void runNode(const Node &n) {
    switch (n.kind) {
    case kKernel:
        runKernel(n.fn, n.grid, n.block, n.params);
        break;
    case kMemcpy:
        std::memmove(reinterpret_cast<void *>(n.dst), reinterpret_cast<const void *>(n.src), n.bytes);
        break;
    case kMemset: {
        auto *p = reinterpret_cast<uint32_t *>(n.dst);
        for (size_t i = 0; i < n.bytes / 4; ++i) p[i] = n.value;
        break;
    }
    case kEmpty:
        break;
    }
}

std::function<void()> nodeRunner(const Node &n) {
    return [n] { runNode(n); };
}

// ---- PTX ------------------------------------------------------------------------

// kNewestPTX is the newest PTX ISA (10*major + minor) the emulated driver
// compiles: 7.8, CUDA 11.8's, the toolkit whose cuda.h it is built with.
constexpr unsigned kNewestPTX = 78;

// jitError notes a module's refusal on stderr and appends it to the JIT
// error log, when one was asked for.
void jitError(std::string *log, const char *fmt, ...) {
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    std::vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    note("%s", buf);
    if (log) {
        if (!log->empty()) log->push_back('\n');
        *log += "emulated JIT: ";
        *log += buf;
    }
}

// parsePTX reads every ".entry NAME(" with its ".param .TYPE" list and
// ".maxntid", and binds each entry to its C++ build. A module with an entry
// the emulator has no build for, or whose parameters differ from the
// build's, is refused with CUDA_ERROR_INVALID_PTX; an ISA version newer
// than the emulated driver's toolkit (kNewestPTX) with
// CUDA_ERROR_UNSUPPORTED_PTX_VERSION, as a real driver refuses PTX from a
// newer toolkit. The reason goes to stderr and to *log (the JIT error log
// of cuModuleLoadDataEx) when log is set.
CUresult parsePTX(const std::string &ptx, Module *m, std::string *log) {
    if (ptx.find(".version") == std::string::npos || ptx.find(".target") == std::string::npos) return CUDA_ERROR_INVALID_IMAGE;
    unsigned major = 0, minor = 0;
    if (std::sscanf(ptx.c_str() + ptx.find(".version"), ".version %u.%u", &major, &minor) != 2) {
        jitError(log, "PTX .version is not MAJOR.MINOR");
        return CUDA_ERROR_INVALID_PTX;
    }
    if (major * 10 + minor > kNewestPTX) {
        jitError(log, "PTX .version %u.%u is newer than this driver's newest, %u.%u", major, minor, kNewestPTX / 10,
                 kNewestPTX % 10);
        return CUDA_ERROR_UNSUPPORTED_PTX_VERSION;
    }
    size_t pos = 0;
    for (;;) {
        size_t e = ptx.find(".entry ", pos);
        if (e == std::string::npos) break;
        size_t nameStart = e + 7, paren = ptx.find('(', nameStart);
        if (paren == std::string::npos) return CUDA_ERROR_INVALID_PTX;
        std::string name = ptx.substr(nameStart, paren - nameStart);
        while (!name.empty() && name.back() == ' ') name.pop_back();
        size_t close = ptx.find(')', paren);
        if (close == std::string::npos) return CUDA_ERROR_INVALID_PTX;
        auto fn = std::make_unique<Function>();
        fn->name = name;
        std::string params = ptx.substr(paren + 1, close - paren - 1);
        for (size_t p = params.find(".param"); p != std::string::npos; p = params.find(".param", p + 6)) {
            size_t t = params.find('.', p + 6);
            std::string type = params.substr(t + 1, params.find(' ', t) - t - 1);
            size_t bits = std::atoi(type.c_str() + 1);
            if (bits != 8 && bits != 16 && bits != 32 && bits != 64) {
                jitError(log, "PTX entry %s: parameter type .%s is not emulated", name.c_str(), type.c_str());
                return CUDA_ERROR_INVALID_PTX;
            }
            fn->sizes.push_back(bits / 8);
        }
        size_t next = ptx.find(".entry ", close);
        size_t mx = ptx.find(".maxntid", close);
        if (mx != std::string::npos && (next == std::string::npos || mx < next)) {
            unsigned a = 1, b = 1, c = 1;
            if (std::sscanf(ptx.c_str() + mx, ".maxntid %u, %u, %u", &a, &b, &c) >= 1) fn->maxThreads = a * b * c;
        }
        for (auto &k : emu::kernelBuilds())
            if (name == k.name) fn->build = &k;
        if (!fn->build) {
            jitError(log, "PTX entry %s has no C++ build in the emulator (device/cuda/emulator/kernels.cpp)", name.c_str());
            return CUDA_ERROR_INVALID_PTX;
        }
        if (fn->build->paramSizes != fn->sizes) {
            jitError(log, "PTX entry %s: its .param list differs from the C++ build's parameters", name.c_str());
            return CUDA_ERROR_INVALID_PTX;
        }
        m->functions.push_back(std::move(fn));
        pos = close;
    }
    return CUDA_SUCCESS;
}

// ---- copies ------------------------------------------------------------------

// checkCopy validates a copy's ranges and returns its direction
// (0 DtoD, 1 HtoD, 2 DtoH) and whether the host side is pinned.
CUresult checkCopy(uintptr_t dst, uintptr_t src, size_t bytes, int kind, bool *pinned) {
    Memory &m = drv().memory;
    *pinned = true;
    switch (kind) {
    case 0:
        if (!m.device(dst, bytes) || !m.device(src, bytes)) return CUDA_ERROR_INVALID_VALUE;
        break;
    case 1: {
        int h = m.host(src, bytes);
        if (!m.device(dst, bytes) || h < 0) return CUDA_ERROR_INVALID_VALUE;
        *pinned = h == 1;
        break;
    }
    case 2: {
        int h = m.host(dst, bytes);
        if (!m.device(src, bytes) || h < 0) return CUDA_ERROR_INVALID_VALUE;
        *pinned = h == 1;
        break;
    }
    }
    return CUDA_SUCCESS;
}

// asyncCopy is cuMemcpy*Async. With pinned host memory (or device to
// device) the copy runs on the stream. With pageable memory it follows the
// documented synchronisation: host to device returns once the source is
// staged (after the stream's earlier work), device to host once the copy
// is done. A pageable copy cannot be captured.
CUresult asyncCopy(uintptr_t dst, uintptr_t src, size_t bytes, int kind, CUstream h) {
    NEED_CONTEXT();
    if (bytes == 0) return CUDA_SUCCESS;
    bool pinned;
    if (CUresult r = checkCopy(dst, src, bytes, kind, &pinned)) return r;
    Driver &d = drv();
    std::unique_lock<std::mutex> l(d.mu);
    CUresult r;
    Stream *s = resolveStream(h, &r);
    if (!s) return r;
    Node n{kMemcpy};
    n.dst = dst;
    n.src = src;
    n.bytes = bytes;
    n.copyKind = kind;
    if (pinned) return submit(s, n, nodeRunner(n));
    if (s->capture) {
        invalidate(s->capture, CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
        return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    }
    if (kind == 1) {
        uint64_t before = s->ticket();
        l.unlock();
        s->waitFor(before);
        auto staged = std::make_shared<std::vector<char>>(reinterpret_cast<const char *>(src), reinterpret_cast<const char *>(src) + bytes);
        l.lock();
        return submit(s, n, [staged, dst, bytes] { std::memcpy(reinterpret_cast<void *>(dst), staged->data(), bytes); });
    }
    uint64_t t;
    if (CUresult r2 = submit(s, n, nodeRunner(n), &t)) return r2;
    l.unlock();
    s->waitFor(t);
    return CUDA_SUCCESS;
}

// syncCopy is cuMemcpyHtoD/DtoH/DtoD: on the legacy stream, capture-unsafe.
// Host to device from pageable memory returns once the source is staged,
// as the documentation allows; the other directions return when done.
CUresult syncCopy(uintptr_t dst, uintptr_t src, size_t bytes, int kind) {
    NEED_CONTEXT();
    UNSAFE_CALL();
    if (bytes == 0) return CUDA_SUCCESS;
    bool pinned;
    if (CUresult r = checkCopy(dst, src, bytes, kind, &pinned)) return r;
    Driver &d = drv();
    Stream *s = &d.legacy;
    std::unique_lock<std::mutex> l(d.mu);
    Node n{kMemcpy};
    n.dst = dst;
    n.src = src;
    n.bytes = bytes;
    n.copyKind = kind;
    if (kind == 1 && !pinned) {
        auto staged = std::make_shared<std::vector<char>>(reinterpret_cast<const char *>(src), reinterpret_cast<const char *>(src) + bytes);
        return submit(s, n, [staged, dst, bytes] { std::memcpy(reinterpret_cast<void *>(dst), staged->data(), bytes); });
    }
    uint64_t t;
    if (CUresult r = submit(s, n, nodeRunner(n), &t)) return r;
    l.unlock();
    s->waitFor(t);
    return CUDA_SUCCESS;
}

bool eventComplete(Event *e) { return !e->recorded || e->stream->reached(e->ticket); }

}  // namespace

// ==== exported entry points =====================================================

EXPORT CUresult cuInit(unsigned int flags) {
    FAULT("cuInit");
    if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
    Driver &d = drv();
    std::lock_guard<std::mutex> l(d.mu);
    d.initialised = true;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDriverGetVersion(int *v) {
    FAULT("cuDriverGetVersion");
    if (!v) return CUDA_ERROR_INVALID_VALUE;
    *v = CUDA_VERSION;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGetCount(int *count) {
    FAULT("cuDeviceGetCount");
    if (!drv().initialised) return CUDA_ERROR_NOT_INITIALIZED;
    if (!count) return CUDA_ERROR_INVALID_VALUE;
    *count = drv().devices;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGet(CUdevice *dev, int ordinal) {
    FAULT("cuDeviceGet");
    if (!drv().initialised) return CUDA_ERROR_NOT_INITIALIZED;
    if (!dev) return CUDA_ERROR_INVALID_VALUE;
    if (ordinal < 0 || ordinal >= drv().devices) return CUDA_ERROR_INVALID_DEVICE;
    *dev = ordinal;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGetAttribute(int *v, CUdevice_attribute attr, CUdevice dev) {
    FAULT("cuDeviceGetAttribute");
    if (!drv().initialised) return CUDA_ERROR_NOT_INITIALIZED;
    if (dev < 0 || dev >= drv().devices) return CUDA_ERROR_INVALID_DEVICE;
    if (!v) return CUDA_ERROR_INVALID_VALUE;
    switch (attr) {
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: *v = 8; break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: *v = 0; break;
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK: *v = 1024; break;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X:
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y: *v = 1024; break;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z: *v = 64; break;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X: *v = 2147483647; break;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y:
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z: *v = 65535; break;
    case CU_DEVICE_ATTRIBUTE_WARP_SIZE: *v = 32; break;
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: *v = 1; break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK: *v = 48 << 10; break;
    case CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING: *v = 1; break;
    case CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS: *v = 0; break;
    // The machine's device number, so that a test sees which devices
    // CUDA_VISIBLE_DEVICES let through.
    case CU_DEVICE_ATTRIBUTE_PCI_BUS_ID: *v = drv().physical[size_t(dev)]; break;
    default: *v = 0; break;
    }
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGetName(char *name, int len, CUdevice dev) {
    FAULT("cuDeviceGetName");
    if (!drv().initialised) return CUDA_ERROR_NOT_INITIALIZED;
    if (dev < 0 || dev >= drv().devices) return CUDA_ERROR_INVALID_DEVICE;
    if (!name || len <= 0) return CUDA_ERROR_INVALID_VALUE;
    std::snprintf(name, size_t(len), "%s", "tolaria emulated CUDA device");
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev) {
    FAULT("cuDeviceTotalMem_v2");
    if (!drv().initialised) return CUDA_ERROR_NOT_INITIALIZED;
    if (dev < 0 || dev >= drv().devices) return CUDA_ERROR_INVALID_DEVICE;
    if (!bytes) return CUDA_ERROR_INVALID_VALUE;
    // cuda.h: "the total amount of memory available on the device dev": the
    // size CUDAEMU_MEMORY gives the machine's device behind the ordinal.
    *bytes = drv().memOf(dev);
    return CUDA_SUCCESS;
}

// Each device has its own primary context. Its first retain bills the
// context (CUDAEMU_CONTEXT_BYTES) on the device and fails with
// CUDA_ERROR_OUT_OF_MEMORY when that does not fit, as creating a context on
// a full GPU does (cuda.h lists CUDA_ERROR_OUT_OF_MEMORY for
// cuDevicePrimaryCtxRetain); its last release drops the bill.
EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext *ctx, CUdevice dev) {
    FAULT("cuDevicePrimaryCtxRetain");
    Driver &d = drv();
    if (!d.initialised) return CUDA_ERROR_NOT_INITIALIZED;
    if (dev < 0 || dev >= d.devices) return CUDA_ERROR_INVALID_DEVICE;
    if (!ctx) return CUDA_ERROR_INVALID_VALUE;
    std::lock_guard<std::mutex> b(d.billMu);
    std::lock_guard<std::mutex> l(d.mu);
    Context &c = d.primaries[size_t(dev)];
    if (c.refs == 0)
        if (CUresult r = d.bill(dev, d.blockBytes[size_t(dev)], d.contextBytes)) return r;
    c.refs++;
    *ctx = reinterpret_cast<CUcontext>(&c);
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev) {
    FAULT("cuDevicePrimaryCtxRelease_v2");
    Driver &d = drv();
    if (!d.initialised) return CUDA_ERROR_NOT_INITIALIZED;
    if (dev < 0 || dev >= d.devices) return CUDA_ERROR_INVALID_DEVICE;
    std::lock_guard<std::mutex> b(d.billMu);
    std::lock_guard<std::mutex> l(d.mu);
    Context &c = d.primaries[size_t(dev)];
    if (c.refs == 0) return CUDA_ERROR_INVALID_CONTEXT;
    if (--c.refs > 0) return CUDA_SUCCESS;
    d.bill(dev, d.blockBytes[size_t(dev)], 0);  // a smaller bill always takes effect
    bool none = std::all_of(d.primaries.begin(), d.primaries.end(), [](const Context &p) { return p.refs == 0; });
    if (none && !faults().sticky.load() && (!d.streams.empty() || !d.events.empty() || !d.execs.empty() || !d.graphs.empty()))
        note("the primary context was released with %zu streams, %zu events, %zu graphs and %zu executables left; they stay allocated",
             d.streams.size(), d.events.size(), d.graphs.size(), d.execs.size());
    return CUDA_SUCCESS;
}

EXPORT CUresult cuCtxSetCurrent(CUcontext ctx) {
    FAULT("cuCtxSetCurrent");
    Driver &d = drv();
    if (!d.initialised) return CUDA_ERROR_NOT_INITIALIZED;
    if (ctx && !d.context(ctx)) return CUDA_ERROR_INVALID_CONTEXT;
    currentCtx = reinterpret_cast<Context *>(ctx);
    return CUDA_SUCCESS;
}

EXPORT CUresult cuCtxGetCurrent(CUcontext *ctx) {
    FAULT("cuCtxGetCurrent");
    if (!drv().initialised) return CUDA_ERROR_NOT_INITIALIZED;
    if (!ctx) return CUDA_ERROR_INVALID_VALUE;
    *ctx = reinterpret_cast<CUcontext>(currentCtx);
    return CUDA_SUCCESS;
}

EXPORT CUresult cuCtxGetDevice(CUdevice *dev) {
    FAULT("cuCtxGetDevice");
    NEED_CONTEXT();
    if (!dev) return CUDA_ERROR_INVALID_VALUE;
    *dev = currentCtx->ordinal;
    return CUDA_SUCCESS;
}

// cuCtxSynchronize is refused while any capture is in progress, in every
// mode, and invalidates every capture in progress.
EXPORT CUresult cuCtxSynchronize() {
    FAULT("cuCtxSynchronize");
    NEED_CONTEXT();
    Driver &d = drv();
    {
        std::lock_guard<std::mutex> l(d.mu);
        if (!d.captures.empty()) {
            for (Capture *c : d.captures) invalidate(c, CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
            return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
        }
    }
    syncAll();
    return CUDA_SUCCESS;
}

// cuMemGetInfo answers for the current context's device. cuda.h: total is
// "the total amount of memory available to the current context", free "the
// amount of memory on the device that is free", which on a GPU shared by
// several processes is what none of them holds ("in a multi-tenant
// situation" it may change at once). So total is the device's size and free
// that size less this process's bill (its blocks and its context) or, with
// CUDAEMU_STATE, less every live process's bill on the device.
EXPORT CUresult cuMemGetInfo_v2(size_t *free, size_t *total) {
    FAULT("cuMemGetInfo_v2");
    NEED_CONTEXT();
    Driver &d = drv();
    int o = currentCtx->ordinal;
    size_t size = d.memOf(o), used;
    {
        std::lock_guard<std::mutex> l(d.billMu);
        if (d.ledger.on()) {
            if (CUresult r = d.ledger.used(d.physical[size_t(o)], &used)) return r;
        } else {
            used = d.blockBytes[size_t(o)] + d.contextBilled[size_t(o)];
        }
    }
    if (free) *free = size > used ? size - used : 0;
    if (total) *total = size;
    return CUDA_SUCCESS;
}

// cuMemAlloc fails with CUDA_ERROR_OUT_OF_MEMORY (cuda.h: "unable to
// allocate enough memory to perform the requested operation") when the
// block would take the device past its size: this process's bill alone, or
// with CUDAEMU_STATE every live process's on the device, as on a GPU that
// processes share.
EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t bytes) {
    FAULT("cuMemAlloc_v2");
    NEED_CONTEXT();
    UNSAFE_CALL();
    if (!p || bytes == 0) return CUDA_ERROR_INVALID_VALUE;
    Driver &d = drv();
    int o = currentCtx->ordinal;
    {
        std::lock_guard<std::mutex> l(d.billMu);
        size_t have = d.blockBytes[size_t(o)];
        if (bytes > SIZE_MAX - have) return CUDA_ERROR_OUT_OF_MEMORY;
        if (CUresult r = d.bill(o, have + bytes, d.contextBilled[size_t(o)])) return r;
    }
    void *m = d.memory.alloc(bytes, false, o);
    if (!m) {
        std::lock_guard<std::mutex> l(d.billMu);
        d.bill(o, d.blockBytes[size_t(o)] - bytes, d.contextBilled[size_t(o)]);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *p = CUdeviceptr(m);
    return CUDA_SUCCESS;
}

// cuMemFree waits for the device's work so far, then poisons the block and
// takes it off its device's bill.
EXPORT CUresult cuMemFree_v2(CUdeviceptr p) {
    FAULT("cuMemFree_v2");
    NEED_CONTEXT();
    UNSAFE_CALL();
    if (p == 0) return CUDA_SUCCESS;
    syncAll();
    Driver &d = drv();
    size_t bytes;
    int o;
    std::lock_guard<std::mutex> l(d.billMu);  // held across the release, so the bill never runs below the blocks
    if (CUresult r = d.memory.release(uintptr_t(p), false, &bytes, &o)) return r;
    d.bill(o, d.blockBytes[size_t(o)] - bytes, d.contextBilled[size_t(o)]);  // a smaller bill always takes effect
    return CUDA_SUCCESS;
}

EXPORT CUresult cuMemAllocHost_v2(void **p, size_t bytes) {
    FAULT("cuMemAllocHost_v2");
    NEED_CONTEXT();
    UNSAFE_CALL();
    if (!p || bytes == 0) return CUDA_ERROR_INVALID_VALUE;
    void *m = drv().memory.alloc(bytes, true);
    if (!m) return CUDA_ERROR_OUT_OF_MEMORY;
    *p = m;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuMemFreeHost(void *p) {
    FAULT("cuMemFreeHost");
    NEED_CONTEXT();
    UNSAFE_CALL();
    syncAll();
    return drv().memory.release(uintptr_t(p), true);
}

EXPORT CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void *src, size_t n) {
    FAULT("cuMemcpyHtoD_v2");
    return syncCopy(uintptr_t(dst), uintptr_t(src), n, 1);
}
EXPORT CUresult cuMemcpyDtoH_v2(void *dst, CUdeviceptr src, size_t n) {
    FAULT("cuMemcpyDtoH_v2");
    return syncCopy(uintptr_t(dst), uintptr_t(src), n, 2);
}
EXPORT CUresult cuMemcpyDtoD_v2(CUdeviceptr dst, CUdeviceptr src, size_t n) {
    FAULT("cuMemcpyDtoD_v2");
    return syncCopy(uintptr_t(dst), uintptr_t(src), n, 0);
}
EXPORT CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void *src, size_t n, CUstream s) {
    FAULT("cuMemcpyHtoDAsync_v2");
    return asyncCopy(uintptr_t(dst), uintptr_t(src), n, 1, s);
}
EXPORT CUresult cuMemcpyDtoHAsync_v2(void *dst, CUdeviceptr src, size_t n, CUstream s) {
    FAULT("cuMemcpyDtoHAsync_v2");
    return asyncCopy(uintptr_t(dst), uintptr_t(src), n, 2, s);
}
EXPORT CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) {
    FAULT("cuMemcpyDtoDAsync_v2");
    return asyncCopy(uintptr_t(dst), uintptr_t(src), n, 0, s);
}

EXPORT CUresult cuMemsetD32Async(CUdeviceptr dst, unsigned int v, size_t n, CUstream h) {
    FAULT("cuMemsetD32Async");
    NEED_CONTEXT();
    if (!drv().memory.device(uintptr_t(dst), n * 4)) return CUDA_ERROR_INVALID_VALUE;
    Driver &d = drv();
    std::lock_guard<std::mutex> l(d.mu);
    CUresult r;
    Stream *s = resolveStream(h, &r);
    if (!s) return r;
    Node node{kMemset};
    node.dst = uintptr_t(dst);
    node.bytes = n * 4;
    node.value = v;
    return submit(s, node, nodeRunner(node));
}

EXPORT CUresult cuMemsetD32_v2(CUdeviceptr dst, unsigned int v, size_t n) {
    FAULT("cuMemsetD32_v2");
    NEED_CONTEXT();
    UNSAFE_CALL();
    if (CUresult r = cuMemsetD32Async(dst, v, n, nullptr)) return r;
    Stream &s = drv().legacy;
    s.waitFor(s.ticket());
    return CUDA_SUCCESS;
}

// ---- streams ------------------------------------------------------------------

EXPORT CUresult cuStreamCreate(CUstream *out, unsigned int flags) {
    FAULT("cuStreamCreate");
    NEED_CONTEXT();
    if (!out || (flags & ~unsigned(CU_STREAM_NON_BLOCKING))) return CUDA_ERROR_INVALID_VALUE;
    auto *s = new Stream;
    s->flags = flags;
    s->start();
    std::lock_guard<std::mutex> l(drv().mu);
    drv().streams.insert(s);
    *out = reinterpret_cast<CUstream>(s);
    return CUDA_SUCCESS;
}

EXPORT CUresult cuStreamCreateWithPriority(CUstream *out, unsigned int flags, int priority) {
    FAULT("cuStreamCreateWithPriority");
    (void)priority;  // one priority: the emulator schedules no work ahead of other work
    return cuStreamCreate(out, flags);
}

// cuStreamDestroy returns at once; the stream's remaining work still runs,
// and its thread ends after it. A capturing stream cannot be destroyed.
EXPORT CUresult cuStreamDestroy_v2(CUstream h) {
    FAULT("cuStreamDestroy_v2");
    NEED_CONTEXT();
    Driver &d = drv();
    Stream *s;
    {
        std::lock_guard<std::mutex> l(d.mu);
        CUresult r;
        s = resolveStream(h, &r);
        if (!s) return r;
        if (s->legacy) return CUDA_ERROR_INVALID_HANDLE;
        if (s->capture) return CUDA_ERROR_ILLEGAL_STATE;
        d.streams.erase(s);
    }
    // The Stream stays allocated: events recorded on it and other streams'
    // waits keep pointing at it. Only its thread ends, once its work is done.
    std::thread([s] { s->stop(); }).detach();
    return CUDA_SUCCESS;
}

EXPORT CUresult cuStreamGetFlags(CUstream h, unsigned int *flags) {
    FAULT("cuStreamGetFlags");
    NEED_CONTEXT();
    std::lock_guard<std::mutex> l(drv().mu);
    CUresult r;
    Stream *s = resolveStream(h, &r);
    if (!s) return r;
    if (!flags) return CUDA_ERROR_INVALID_VALUE;
    *flags = s->flags;
    return CUDA_SUCCESS;
}

// waitOrRefuse is the shared start of cuStreamSynchronize and
// cuStreamQuery: on a capturing stream both are refused and invalidate the
// capture; on the legacy stream while a blocking stream captures, likewise.
CUresult streamForSync(CUstream h, Stream **out, uint64_t *ticket) {
    Driver &d = drv();
    std::lock_guard<std::mutex> l(d.mu);
    CUresult r;
    Stream *s = resolveStream(h, &r);
    if (!s) return r;
    if (s->capture) {
        invalidate(s->capture, CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
        return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    }
    if (implicitConflict(s)) return CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
    *out = s;
    *ticket = s->ticket();
    return CUDA_SUCCESS;
}

EXPORT CUresult cuStreamSynchronize(CUstream h) {
    FAULT("cuStreamSynchronize");
    NEED_CONTEXT();
    Stream *s;
    uint64_t t;
    if (CUresult r = streamForSync(h, &s, &t)) return r;
    if (s->legacy) {
        // The legacy stream's work waits for every blocking stream's, so
        // waiting for it includes them; non-blocking streams are not waited for.
        std::vector<std::pair<Stream *, uint64_t>> w;
        {
            std::lock_guard<std::mutex> l(drv().mu);
            w = legacyDeps(s);
        }
        for (auto &p : w) p.first->waitFor(p.second);
    }
    s->waitFor(t);
    return CUDA_SUCCESS;
}

EXPORT CUresult cuStreamQuery(CUstream h) {
    FAULT("cuStreamQuery");
    NEED_CONTEXT();
    Stream *s;
    uint64_t t;
    if (CUresult r = streamForSync(h, &s, &t)) return r;
    return s->reached(t) ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

// cuStreamWaitEvent: a capturing stream waiting on an event of its own
// capture adds the event's nodes to its dependencies; waiting on an event
// of another capture would merge them (MERGE); on an event recorded outside
// any capture it would cross the capture's boundary (ISOLATION). A stream
// that is not capturing and waits on a captured event joins that capture.
EXPORT CUresult cuStreamWaitEvent(CUstream h, CUevent ev, unsigned int flags) {
    FAULT("cuStreamWaitEvent");
    NEED_CONTEXT();
    Driver &d = drv();
    std::lock_guard<std::mutex> l(d.mu);
    CUresult r;
    Stream *s = resolveStream(h, &r);
    if (!s) return r;
    auto *e = reinterpret_cast<Event *>(ev);
    if (!d.events.count(e)) return CUDA_ERROR_INVALID_HANDLE;
    if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
    Capture *ec = e->capture;
    bool live = ec && std::find(d.captures.begin(), d.captures.end(), ec) != d.captures.end() && ec->id == e->captureId;
    if (!live && !e->recorded) return CUDA_SUCCESS;  // nothing to wait for, in or out of a capture
    if (Capture *c = s->capture) {
        if (c->invalidated) return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
        if (live && ec == c) {
            for (size_t n : e->nodes)
                if (std::find(s->tail.begin(), s->tail.end(), n) == s->tail.end()) s->tail.push_back(n);
            return CUDA_SUCCESS;
        }
        invalidate(c, live ? CUDA_ERROR_STREAM_CAPTURE_MERGE : CUDA_ERROR_STREAM_CAPTURE_ISOLATION);
        return live ? CUDA_ERROR_STREAM_CAPTURE_MERGE : CUDA_ERROR_STREAM_CAPTURE_ISOLATION;
    }
    if (live) {
        if (ec->invalidated) return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
        if (s->legacy) {
            invalidate(ec, CUDA_ERROR_STREAM_CAPTURE_IMPLICIT);
            return CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
        }
        s->capture = ec;
        s->tail = e->nodes;
        ec->streams.insert(s);
        return CUDA_SUCCESS;
    }
    Stream *o = e->stream;
    uint64_t t = e->ticket;
    Node n{kEmpty};
    return submit(s, n, [o, t] { o->waitFor(t); });
}

// ---- events -------------------------------------------------------------------

EXPORT CUresult cuEventCreate(CUevent *out, unsigned int flags) {
    FAULT("cuEventCreate");
    NEED_CONTEXT();
    if (!out || (flags & ~unsigned(CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING | CU_EVENT_INTERPROCESS))) return CUDA_ERROR_INVALID_VALUE;
    if ((flags & CU_EVENT_INTERPROCESS) && !(flags & CU_EVENT_DISABLE_TIMING)) return CUDA_ERROR_INVALID_VALUE;
    auto *e = new Event;
    e->flags = flags;
    std::lock_guard<std::mutex> l(drv().mu);
    drv().events.insert(e);
    *out = reinterpret_cast<CUevent>(e);
    return CUDA_SUCCESS;
}

EXPORT CUresult cuEventDestroy_v2(CUevent ev) {
    FAULT("cuEventDestroy_v2");
    NEED_CONTEXT();
    Driver &d = drv();
    std::lock_guard<std::mutex> l(d.mu);
    auto *e = reinterpret_cast<Event *>(ev);
    if (!d.events.erase(e)) return CUDA_ERROR_INVALID_HANDLE;
    // Streams waiting on it hold their own copy of what they wait for.
    delete e;
    return CUDA_SUCCESS;
}

// cuEventRecord captures the stream's current work; inside a capture it
// stands for the capture's current nodes and adds none.
EXPORT CUresult cuEventRecord(CUevent ev, CUstream h) {
    FAULT("cuEventRecord");
    NEED_CONTEXT();
    Driver &d = drv();
    std::lock_guard<std::mutex> l(d.mu);
    auto *e = reinterpret_cast<Event *>(ev);
    if (!d.events.count(e)) return CUDA_ERROR_INVALID_HANDLE;
    CUresult r;
    Stream *s = resolveStream(h, &r);
    if (!s) return r;
    if (Capture *c = s->capture) {
        if (c->invalidated) return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
        e->capture = c;
        e->captureId = c->id;
        e->nodes = s->tail;
        return CUDA_SUCCESS;
    }
    auto stamp = std::make_shared<Stamp>();
    uint64_t t;
    Node n{kEmpty};
    if (CUresult r2 = submit(s, n, [stamp] { stamp->at = Clock::now(); stamp->set = true; }, &t)) return r2;
    e->capture = nullptr;
    e->nodes.clear();
    e->recorded = true;
    e->stream = s;
    e->ticket = t;
    e->stamp = stamp;
    return CUDA_SUCCESS;
}

// capturedEvent: an event whose latest record is in a capture still in
// progress cannot be queried or waited for (CUDA_ERROR_CAPTURED_EVENT).
bool capturedEvent(Event *e) {
    Driver &d = drv();
    return e->capture && std::find(d.captures.begin(), d.captures.end(), e->capture) != d.captures.end() &&
           e->capture->id == e->captureId;
}

// refuseCapturedEvent answers a host query of, wait for or timing of an
// event last recorded in a capture still in progress: the call is refused
// (CUDA_ERROR_CAPTURED_EVENT) and, as for cuStreamQuery on a capturing
// stream, the capture is invalidated. An H100 with driver 580 did so when
// another thread queried an event it had recorded into a relaxed-mode
// capture: the capture's next call failed with
// CUDA_ERROR_STREAM_CAPTURE_INVALIDATED. Call with the driver lock held.
CUresult refuseCapturedEvent(Event *e) {
    invalidate(e->capture, CUDA_ERROR_CAPTURED_EVENT);
    return CUDA_ERROR_CAPTURED_EVENT;
}

// A host query of or wait for an event, even one recorded outside any
// capture on a stream that is not capturing, is a potentially unsafe call:
// the capture modes apply to it as to an allocation (prohibited), and a
// refused call invalidates the captures that prohibited it. The CUDA
// programming guide's "Prohibited and Unhandled Operations" forbids querying
// or synchronising a captured event or a handle that encompasses a capture;
// that the rule reaches any event under a global-mode capture is what
// drivers do rather than what the page says: PyTorch's graph notes say event
// queries are not allowed during a default-mode capture (its caching
// allocator defers them until no capture runs, and its NCCL watchdog's
// queries are counted and drained before a capture begins), a pinned-memory
// free polling its event from another thread during a global capture failed
// with 900 on an H100 (alpha0422/study, cuda-graph/001.pin-mem.py), and HIP
// was changed to match: hipEventQuery/hipEventSynchronize refused under
// another thread's global capture unless the caller's mode is relaxed or
// thread-local (ROCm/rocm-systems PRs 2177 and 3176). A captured event is
// refused first, with its own code.
EXPORT CUresult cuEventQuery(CUevent ev) {
    FAULT("cuEventQuery");
    NEED_CONTEXT();
    Driver &d = drv();
    std::lock_guard<std::mutex> l(d.mu);
    auto *e = reinterpret_cast<Event *>(ev);
    if (!d.events.count(e)) return CUDA_ERROR_INVALID_HANDLE;
    if (capturedEvent(e)) return refuseCapturedEvent(e);
    if (prohibited()) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    return eventComplete(e) ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

EXPORT CUresult cuEventSynchronize(CUevent ev) {
    FAULT("cuEventSynchronize");
    NEED_CONTEXT();
    Driver &d = drv();
    Stream *s;
    uint64_t t;
    {
        std::lock_guard<std::mutex> l(d.mu);
        auto *e = reinterpret_cast<Event *>(ev);
        if (!d.events.count(e)) return CUDA_ERROR_INVALID_HANDLE;
        if (capturedEvent(e)) return refuseCapturedEvent(e);
        if (prohibited()) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
        if (!e->recorded) return CUDA_SUCCESS;
        s = e->stream;
        t = e->ticket;
    }
    s->waitFor(t);
    return CUDA_SUCCESS;
}

EXPORT CUresult cuEventElapsedTime(float *ms, CUevent start, CUevent end) {
    FAULT("cuEventElapsedTime");
    NEED_CONTEXT();
    Driver &d = drv();
    std::lock_guard<std::mutex> l(d.mu);
    auto *a = reinterpret_cast<Event *>(start), *b = reinterpret_cast<Event *>(end);
    if (!ms) return CUDA_ERROR_INVALID_VALUE;
    if (!d.events.count(a) || !d.events.count(b)) return CUDA_ERROR_INVALID_HANDLE;
    if ((a->flags | b->flags) & CU_EVENT_DISABLE_TIMING) return CUDA_ERROR_INVALID_HANDLE;
    if (capturedEvent(a)) return refuseCapturedEvent(a);
    if (capturedEvent(b)) return refuseCapturedEvent(b);
    if (!a->recorded || !b->recorded) return CUDA_ERROR_INVALID_HANDLE;
    if (!eventComplete(a) || !eventComplete(b)) return CUDA_ERROR_NOT_READY;
    *ms = std::chrono::duration<float, std::milli>(b->stamp->at - a->stamp->at).count();
    return CUDA_SUCCESS;
}

// ---- modules and launches ---------------------------------------------------

// loadModule is cuModuleLoadData with the JIT's logs: errors to *errLog,
// and a line per entry point to *infoLog.
CUresult loadModule(CUmodule *out, const void *image, std::string *errLog, std::string *infoLog) {
    NEED_CONTEXT();
    UNSAFE_CALL();
    if (!out || !image) return CUDA_ERROR_INVALID_VALUE;
    auto m = std::make_unique<Module>();
    if (CUresult r = parsePTX(static_cast<const char *>(image), m.get(), errLog)) return r;
    if (infoLog)
        for (auto &f : m->functions) {
            if (!infoLog->empty()) infoLog->push_back('\n');
            *infoLog += "emulated JIT: entry " + f->name + ", " + std::to_string(f->sizes.size()) + " parameters";
        }
    Driver &d = drv();
    std::lock_guard<std::mutex> l(d.mu);
    for (auto &f : m->functions) d.functions.insert(f.get());
    *out = reinterpret_cast<CUmodule>(m.get());
    d.modules.insert(m.release());
    return CUDA_SUCCESS;
}

EXPORT CUresult cuModuleLoadData(CUmodule *out, const void *image) {
    FAULT("cuModuleLoadData");
    return loadModule(out, image, nullptr, nullptr);
}

// copyLog writes a JIT log into the caller's buffer as the CUDA driver API
// documents the log options: the size option is the buffer's size on the
// way in and the bytes filled (with the terminating NUL) on the way out.
void copyLog(const std::string &text, char *buf, void **sizeSlot) {
    if (!buf || !sizeSlot) return;
    size_t cap = (size_t)(uintptr_t)*sizeSlot;
    if (cap == 0) return;
    size_t n = std::min(text.size(), cap - 1);
    std::memcpy(buf, text.data(), n);
    buf[n] = 0;
    *sizeSlot = (void *)(uintptr_t)(n + 1);
}

// cuModuleLoadDataEx honours the log options (CU_JIT_INFO_LOG_BUFFER,
// CU_JIT_ERROR_LOG_BUFFER and their sizes) and CU_JIT_WALL_TIME; the other
// options change nothing in the emulator.
EXPORT CUresult cuModuleLoadDataEx(CUmodule *out, const void *image, unsigned int n, CUjit_option *opts, void **vals) {
    FAULT("cuModuleLoadDataEx");
    if (n > 0 && (!opts || !vals)) return CUDA_ERROR_INVALID_VALUE;
    char *infoBuf = nullptr, *errBuf = nullptr;
    void **infoSize = nullptr, **errSize = nullptr, **wall = nullptr;
    for (unsigned i = 0; i < n; i++) switch (opts[i]) {
        case CU_JIT_INFO_LOG_BUFFER: infoBuf = static_cast<char *>(vals[i]); break;
        case CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES: infoSize = &vals[i]; break;
        case CU_JIT_ERROR_LOG_BUFFER: errBuf = static_cast<char *>(vals[i]); break;
        case CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES: errSize = &vals[i]; break;
        case CU_JIT_WALL_TIME: wall = &vals[i]; break;
        default: break;
        }
    auto start = std::chrono::steady_clock::now();
    std::string errLog, infoLog;
    CUresult r = loadModule(out, image, &errLog, &infoLog);
    if (wall) {
        float ms = std::chrono::duration<float, std::milli>(std::chrono::steady_clock::now() - start).count();
        std::memcpy(wall, &ms, sizeof ms);
    }
    copyLog(errLog, errBuf, errSize);
    copyLog(r == CUDA_SUCCESS ? infoLog : std::string(), infoBuf, infoSize);
    return r;
}

EXPORT CUresult cuModuleUnload(CUmodule h) {
    FAULT("cuModuleUnload");
    NEED_CONTEXT();
    UNSAFE_CALL();
    Driver &d = drv();
    std::lock_guard<std::mutex> l(d.mu);
    auto *m = reinterpret_cast<Module *>(h);
    if (!d.modules.erase(m)) return CUDA_ERROR_INVALID_HANDLE;
    // The functions stay allocated: executables may still hold them.
    for (auto &f : m->functions) d.functions.erase(f.get());
    for (auto &f : m->functions) f.release();
    delete m;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuModuleGetFunction(CUfunction *out, CUmodule h, const char *name) {
    FAULT("cuModuleGetFunction");
    NEED_CONTEXT();
    Driver &d = drv();
    std::lock_guard<std::mutex> l(d.mu);
    auto *m = reinterpret_cast<Module *>(h);
    if (!d.modules.count(m)) return CUDA_ERROR_INVALID_HANDLE;
    if (!out || !name) return CUDA_ERROR_INVALID_VALUE;
    for (auto &f : m->functions)
        if (f->name == name) {
            *out = reinterpret_cast<CUfunction>(f.get());
            return CUDA_SUCCESS;
        }
    return CUDA_ERROR_NOT_FOUND;
}

EXPORT CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                               unsigned shared, CUstream h, void **params, void **extra) {
    FAULT("cuLaunchKernel");
    NEED_CONTEXT();
    Driver &d = drv();
    std::lock_guard<std::mutex> l(d.mu);
    auto *fn = reinterpret_cast<Function *>(f);
    if (!d.functions.count(fn)) return CUDA_ERROR_INVALID_HANDLE;
    CUresult r;
    Stream *s = resolveStream(h, &r);
    if (!s) return r;
    if (extra || shared != 0) return CUDA_ERROR_INVALID_VALUE;  // tolaria's kernels use static shared memory only
    if (gx == 0 || gy == 0 || gz == 0 || bx == 0 || by == 0 || bz == 0 || gy > 65535 || gz > 65535 || bz > 64)
        return CUDA_ERROR_INVALID_VALUE;
    if (uint64_t(bx) * by * bz > fn->maxThreads || uint64_t(bx) * by * bz > 1024) return CUDA_ERROR_INVALID_VALUE;
    if (!params && !fn->sizes.empty()) return CUDA_ERROR_INVALID_VALUE;
    Node n{kKernel};
    n.fn = fn;
    n.grid[0] = gx, n.grid[1] = gy, n.grid[2] = gz;
    n.block[0] = bx, n.block[1] = by, n.block[2] = bz;
    n.params.resize(fn->sizes.size());
    for (size_t i = 0; i < fn->sizes.size(); ++i) std::memcpy(&n.params[i], params[i], fn->sizes[i]);
    return submit(s, n, nodeRunner(n));
}

// ---- capture --------------------------------------------------------------------

EXPORT CUresult cuStreamBeginCapture_v2(CUstream h, CUstreamCaptureMode mode) {
    FAULT("cuStreamBeginCapture_v2");
    NEED_CONTEXT();
    Driver &d = drv();
    std::lock_guard<std::mutex> l(d.mu);
    CUresult r;
    Stream *s = resolveStream(h, &r);
    if (!s) return r;
    if (s->legacy) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    if (s->capture) return CUDA_ERROR_ILLEGAL_STATE;
    if (mode != CU_STREAM_CAPTURE_MODE_GLOBAL && mode != CU_STREAM_CAPTURE_MODE_THREAD_LOCAL && mode != CU_STREAM_CAPTURE_MODE_RELAXED)
        return CUDA_ERROR_INVALID_VALUE;
    auto *c = new Capture;
    c->mode = mode;
    c->thread = std::this_thread::get_id();
    c->origin = s;
    c->id = d.nextCapture++;
    c->streams.insert(s);
    s->capture = c;
    s->tail.clear();
    d.captures.push_back(c);
    return CUDA_SUCCESS;
}

// unjoined reports whether some captured node is not an ancestor of (or
// one of) the origin stream's current nodes: a fork never joined back.
bool unjoined(const Capture *c) {
    const auto &nodes = c->graph->nodes;
    std::vector<char> seen(nodes.size(), 0);
    std::vector<size_t> stack(c->origin->tail);
    while (!stack.empty()) {
        size_t n = stack.back();
        stack.pop_back();
        if (seen[n]) continue;
        seen[n] = 1;
        for (size_t p : nodes[n].deps) stack.push_back(p);
    }
    return std::find(seen.begin(), seen.end(), 0) != seen.end();
}

EXPORT CUresult cuStreamEndCapture(CUstream h, CUgraph *out) {
    FAULT("cuStreamEndCapture");
    NEED_CONTEXT();
    Driver &d = drv();
    std::lock_guard<std::mutex> l(d.mu);
    CUresult r;
    Stream *s = resolveStream(h, &r);
    if (!s) return r;
    if (!out) return CUDA_ERROR_INVALID_VALUE;
    Capture *c = s->capture;
    if (!c) return CUDA_ERROR_ILLEGAL_STATE;
    if (c->origin != s) {
        invalidate(c, CUDA_ERROR_STREAM_CAPTURE_UNMATCHED);
        return CUDA_ERROR_STREAM_CAPTURE_UNMATCHED;
    }
    if (c->mode != CU_STREAM_CAPTURE_MODE_RELAXED && c->thread != std::this_thread::get_id())
        return CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD;
    *out = nullptr;
    CUresult result = CUDA_SUCCESS;
    if (c->invalidated)
        result = CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
    else if (unjoined(c))
        result = CUDA_ERROR_STREAM_CAPTURE_UNJOINED;
    for (Stream *o : c->streams) {
        o->capture = nullptr;
        o->tail.clear();
    }
    d.captures.erase(std::find(d.captures.begin(), d.captures.end(), c));
    if (result == CUDA_SUCCESS) {
        Graph *g = c->graph.release();
        d.graphs.insert(g);
        *out = reinterpret_cast<CUgraph>(g);
    }
    delete c;
    return result;
}

EXPORT CUresult cuStreamIsCapturing(CUstream h, CUstreamCaptureStatus *status) {
    FAULT("cuStreamIsCapturing");
    NEED_CONTEXT();
    Driver &d = drv();
    std::lock_guard<std::mutex> l(d.mu);
    CUresult r;
    Stream *s = resolveStream(h, &r);
    if (!s) return r;
    if (!status) return CUDA_ERROR_INVALID_VALUE;
    if (s->legacy && implicitConflict(s)) return CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
    if (!s->capture)
        *status = CU_STREAM_CAPTURE_STATUS_NONE;
    else
        *status = s->capture->invalidated ? CU_STREAM_CAPTURE_STATUS_INVALIDATED : CU_STREAM_CAPTURE_STATUS_ACTIVE;
    return CUDA_SUCCESS;
}

// ---- graphs -----------------------------------------------------------------------

namespace {

// GraphUse marks a CUgraph or CUgraphExec in use by the calling thread for
// one call. Graph objects are not internally synchronized: "API calls
// accessing the same graph object must be serialized externally", read-only
// looking ones included (driver API, "Graph object thread safety"). What the
// driver does when they are not is undefined; here the second call fails
// with CUDA_ERROR_ILLEGAL_STATE and a note on stderr. A call uses the object
// from its entry to its return, its wait for the driver lock included, so
// two unserialised calls are caught although that lock would order them.
class GraphUse {
  public:
    GraphUse(const void *h, const char *call) : h_(h) {
        std::lock_guard<std::mutex> l(mu());
        ok_ = busy().insert(h).second;
        if (!ok_)
            std::fprintf(stderr,
                         "cuda emulator: %s on graph object %p while another thread's call on it is in progress; "
                         "graph objects are not internally synchronized\n",
                         call, h);
    }
    ~GraphUse() { release(); }
    // release ends the use early: a destroy calls it before it frees the
    // object, whose address a new object may then take at once.
    void release() {
        if (!ok_) return;
        ok_ = false;
        std::lock_guard<std::mutex> l(mu());
        busy().erase(h_);
    }
    GraphUse(const GraphUse &) = delete;
    GraphUse &operator=(const GraphUse &) = delete;
    bool ok() const { return ok_; }

  private:
    // Never destroyed, like the driver: stream threads may outlive static destructors.
    static std::mutex &mu() {
        static auto *m = new std::mutex;
        return *m;
    }
    static std::set<const void *> &busy() {
        static auto *b = new std::set<const void *>;
        return *b;
    }
    const void *h_;
    bool ok_;
};

}  // namespace

#define GRAPH_USE(h)                                          \
    GraphUse graphUse_(h, __func__);                          \
    do {                                                      \
        if (!graphUse_.ok()) return CUDA_ERROR_ILLEGAL_STATE; \
    } while (0)

EXPORT CUresult cuGraphGetNodes(CUgraph h, CUgraphNode *nodes, size_t *n) {
    FAULT("cuGraphGetNodes");
    GRAPH_USE(h);
    NEED_CONTEXT();
    Driver &d = drv();
    std::lock_guard<std::mutex> l(d.mu);
    auto *g = reinterpret_cast<Graph *>(h);
    if (!d.graphs.count(g)) return CUDA_ERROR_INVALID_HANDLE;
    if (!n) return CUDA_ERROR_INVALID_VALUE;
    if (nodes) return CUDA_ERROR_NOT_SUPPORTED;  // node handles are not emulated; counting is
    *n = g->nodes.size();
    return CUDA_SUCCESS;
}

EXPORT CUresult cuGraphDestroy(CUgraph h) {
    FAULT("cuGraphDestroy");
    GRAPH_USE(h);
    NEED_CONTEXT();
    Driver &d = drv();
    std::lock_guard<std::mutex> l(d.mu);
    auto *g = reinterpret_cast<Graph *>(h);
    if (!d.graphs.erase(g)) return CUDA_ERROR_INVALID_HANDLE;
    graphUse_.release();
    delete g;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuGraphInstantiateWithFlags(CUgraphExec *out, CUgraph h, unsigned long long flags) {
    FAULT("cuGraphInstantiateWithFlags");
    GRAPH_USE(h);
    NEED_CONTEXT();
    Driver &d = drv();
    std::lock_guard<std::mutex> l(d.mu);
    auto *g = reinterpret_cast<Graph *>(h);
    if (!d.graphs.count(g)) return CUDA_ERROR_INVALID_HANDLE;
    if (!out || flags != 0) return CUDA_ERROR_INVALID_VALUE;
    auto *x = new Exec;
    x->nodes = std::make_shared<const std::vector<Node>>(g->nodes);
    d.execs.insert(x);
    *out = reinterpret_cast<CUgraphExec>(x);
    return CUDA_SUCCESS;
}

// cuGraphExecDestroy is a potentially unsafe call too (prohibited): it
// frees the executable's device resources, as cuMemFree does. ONNX Runtime
// measured it refused with 900 while the calling thread's stream captured
// (H200, CUDA 12.6 runtime, driver 580; microsoft/onnxruntime PR 32081),
// and the programming guide's "Invalidation" rule (an invalid operation
// attempted during a capture invalidates the capture graphs it touches)
// makes the refusal end the capture.
EXPORT CUresult cuGraphExecDestroy(CUgraphExec h) {
    FAULT("cuGraphExecDestroy");
    GRAPH_USE(h);
    NEED_CONTEXT();
    Driver &d = drv();
    std::lock_guard<std::mutex> l(d.mu);
    auto *x = reinterpret_cast<Exec *>(h);
    if (!d.execs.count(x)) return CUDA_ERROR_INVALID_HANDLE;
    if (prohibited()) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    d.execs.erase(x);
    graphUse_.release();
    delete x;  // launches in flight hold their own snapshot of the nodes
    return CUDA_SUCCESS;
}

// cuGraphLaunch runs the executable's nodes in order (captured nodes come
// after their dependencies) as one operation on the stream, after the
// previous launch of the same executable. Launching into a capturing stream
// is refused with 900 (measured on an H200 with driver 580, ONNX Runtime PR
// 32081: "CUDA does not allow launching a graph into a capturing stream";
// a graph goes into another as a child graph node, not by a launch), and as
// every invalid operation in a capture does, it invalidates the capture.
EXPORT CUresult cuGraphLaunch(CUgraphExec h, CUstream hs) {
    FAULT("cuGraphLaunch");
    GRAPH_USE(h);
    NEED_CONTEXT();
    Driver &d = drv();
    std::lock_guard<std::mutex> l(d.mu);
    auto *x = reinterpret_cast<Exec *>(h);
    if (!d.execs.count(x)) return CUDA_ERROR_INVALID_HANDLE;
    CUresult r;
    Stream *s = resolveStream(hs, &r);
    if (!s) return r;
    if (Capture *c = s->capture) {
        // Refused, and the capture with it (see the comment above).
        if (c->invalidated) return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
        invalidate(c, CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
        return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    }
    auto nodes = x->nodes;
    Stream *prev = x->lastStream;
    uint64_t prevTicket = x->lastTicket;
    uint64_t t;
    Node n{kEmpty};
    if (CUresult r2 = submit(s, n, [nodes, prev, prevTicket, s] {
            if (prev && prev != s) prev->waitFor(prevTicket);
            for (const Node &node : *nodes) runNode(node);
        }, &t))
        return r2;
    x->lastStream = s;
    x->lastTicket = t;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuGraphUpload(CUgraphExec h, CUstream hs) {
    FAULT("cuGraphUpload");
    GRAPH_USE(h);
    NEED_CONTEXT();
    Driver &d = drv();
    std::lock_guard<std::mutex> l(d.mu);
    auto *x = reinterpret_cast<Exec *>(h);
    if (!d.execs.count(x)) return CUDA_ERROR_INVALID_HANDLE;
    CUresult r;
    Stream *s = resolveStream(hs, &r);
    if (!s) return r;
    if (s->capture) return CUDA_ERROR_NOT_SUPPORTED;
    Node n{kEmpty};
    return submit(s, n, [] {});  // nothing to upload: memory is host memory
}

namespace {

// execUpdate compares the graph with the executable node by node: the same
// number of nodes with the same dependencies (TOPOLOGY_CHANGED), the same
// kinds (NODE_TYPE_CHANGED), kernels of the same function
// (FUNCTION_CHANGED), copies in the same direction (PARAMETERS_CHANGED).
// On success, later launches run the graph's parameters.
CUresult execUpdate(CUgraphExec hx, CUgraph hg, CUgraphExecUpdateResult *result, size_t *errIndex) {
    GraphUse ux(hx, "cuGraphExecUpdate"), ug(hg, "cuGraphExecUpdate");
    if (!ux.ok() || !ug.ok()) return CUDA_ERROR_ILLEGAL_STATE;
    NEED_CONTEXT();
    Driver &d = drv();
    std::lock_guard<std::mutex> l(d.mu);
    auto *x = reinterpret_cast<Exec *>(hx);
    auto *g = reinterpret_cast<Graph *>(hg);
    if (!d.execs.count(x) || !d.graphs.count(g)) return CUDA_ERROR_INVALID_HANDLE;
    const auto &old = *x->nodes;
    *errIndex = SIZE_MAX;
    auto fail = [&](CUgraphExecUpdateResult why, size_t i) {
        *result = why;
        *errIndex = i;
        return CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE;
    };
    if (old.size() != g->nodes.size()) return fail(CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED, SIZE_MAX);
    for (size_t i = 0; i < old.size(); ++i) {
        const Node &a = old[i], &b = g->nodes[i];
        if (a.deps != b.deps) return fail(CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED, i);
        if (a.kind != b.kind) return fail(CU_GRAPH_EXEC_UPDATE_ERROR_NODE_TYPE_CHANGED, i);
        if (a.kind == kKernel && a.fn != b.fn) return fail(CU_GRAPH_EXEC_UPDATE_ERROR_FUNCTION_CHANGED, i);
        if (a.kind == kMemcpy && a.copyKind != b.copyKind) return fail(CU_GRAPH_EXEC_UPDATE_ERROR_PARAMETERS_CHANGED, i);
    }
    x->nodes = std::make_shared<const std::vector<Node>>(g->nodes);
    *result = CU_GRAPH_EXEC_UPDATE_SUCCESS;
    return CUDA_SUCCESS;
}

}  // namespace

// The CUDA 11.x entry point: error node and result out-parameters. Node
// handles are not emulated, so the error node is always NULL.
EXPORT CUresult cuGraphExecUpdate(CUgraphExec hx, CUgraph hg, CUgraphNode *errNode, CUgraphExecUpdateResult *result) {
    FAULT("cuGraphExecUpdate");
    if (!errNode || !result) return CUDA_ERROR_INVALID_VALUE;
    size_t idx;
    *errNode = nullptr;
    return execUpdate(hx, hg, result, &idx);
}

// The CUDA 12 entry point (cuda.h 12.x maps cuGraphExecUpdate to it); its
// result structure is declared here because the 11.8 headers lack it.
struct tl_CUgraphExecUpdateResultInfo {
    CUgraphExecUpdateResult result;
    CUgraphNode errorNode;
    CUgraphNode errorFromNode;
};

EXPORT CUresult cuGraphExecUpdate_v2(CUgraphExec hx, CUgraph hg, tl_CUgraphExecUpdateResultInfo *info) {
    FAULT("cuGraphExecUpdate_v2");
    if (!info) return CUDA_ERROR_INVALID_VALUE;
    size_t idx;
    info->errorNode = nullptr;
    info->errorFromNode = nullptr;
    return execUpdate(hx, hg, &info->result, &idx);
}

// ---- NVML, as far as a process measures its own context -------------------
//
// The build links libnvidia-ml.so.1 to this library, so that a process that
// loads NVML at run time (device/cuda's ContextMemory) finds these entry
// points, which answer from the emulator's own accounting: each process's
// bill on the machine's device, its context included; with CUDAEMU_STATE
// every live process on it, as nvidia-smi lists them. CUDAEMU_NVML=off makes
// nvmlInit_v2 fail (no NVML on the machine); CUDAEMU_NVML=hidden lists no
// process (a container without the host's PID namespace), so that the
// caller's fallback can be exercised. The layout is nvml.h's
// nvmlProcessInfo_t, as nvmlDeviceGetComputeRunningProcesses_v3 fills it.
struct tl_nvmlProcessInfo {
    unsigned int pid;
    unsigned long long usedGpuMemory;
    unsigned int gpuInstanceId;
    unsigned int computeInstanceId;
};
static_assert(sizeof(tl_nvmlProcessInfo) == 24, "nvmlProcessInfo_t is 24 bytes");

namespace {
enum { kNvmlSuccess = 0, kNvmlInvalidArgument = 2, kNvmlNotFound = 6, kNvmlInsufficientSize = 7, kNvmlLibraryNotFound = 12 };

bool nvmlMode(const char *want) {
    const char *m = std::getenv("CUDAEMU_NVML");
    return m && std::strcmp(m, want) == 0;
}
}  // namespace

EXPORT int nvmlInit_v2(void) { return nvmlMode("off") ? kNvmlLibraryNotFound : kNvmlSuccess; }

EXPORT int nvmlShutdown(void) { return kNvmlSuccess; }

EXPORT const char *nvmlErrorString(int r) {
    switch (r) {
    case kNvmlSuccess: return "Success";
    case kNvmlInvalidArgument: return "Invalid Argument";
    case kNvmlNotFound: return "Not Found";
    case kNvmlInsufficientSize: return "Insufficient Size";
    case kNvmlLibraryNotFound: return "NVML Shared Library Not Found";
    default: return "Unknown Error";
    }
}

// The handle is the machine's device number plus one; the PCI bus id reads
// domain:bus:device.function with the bus the device number, as
// cuDeviceGetAttribute(CU_DEVICE_ATTRIBUTE_PCI_BUS_ID) answers.
EXPORT int nvmlDeviceGetHandleByPciBusId_v2(const char *busId, void **device) {
    unsigned domain = 0, bus = 0, dev = 0;
    if (!busId || !device || std::sscanf(busId, "%x:%x:%x", &domain, &bus, &dev) != 3) return kNvmlInvalidArgument;
    if (domain != 0 || dev != 0 || bus >= drv().sizes.size()) return kNvmlNotFound;
    *device = reinterpret_cast<void *>(uintptr_t(bus) + 1);
    return kNvmlSuccess;
}

EXPORT int nvmlDeviceGetComputeRunningProcesses_v3(void *device, unsigned int *count, tl_nvmlProcessInfo *infos) {
    Driver &d = drv();
    uintptr_t h = reinterpret_cast<uintptr_t>(device);
    if (!count || h == 0 || h > d.sizes.size()) return kNvmlInvalidArgument;
    int phys = int(h - 1);
    std::vector<std::pair<long, size_t>> procs;
    if (!nvmlMode("hidden")) {
        std::lock_guard<std::mutex> l(d.billMu);
        if (d.ledger.on()) {
            std::vector<Ledger::Proc> live;
            if (d.ledger.live(phys, &live) != CUDA_SUCCESS) return kNvmlNotFound;
            for (const Ledger::Proc &p : live) procs.emplace_back(p.pid, p.inUse);
        } else {
            // This process is on the device while it holds the device's
            // primary context or memory there, even with a bill of 0.
            std::lock_guard<std::mutex> m(d.mu);
            size_t mine = 0;
            bool on = false;
            for (int o = 0; o < d.devices; ++o) {
                size_t u = size_t(o);
                if (d.physical[u] != phys || (d.primaries[u].refs == 0 && d.blockBytes[u] == 0)) continue;
                mine += d.contextBilled[u] + d.blockBytes[u];
                on = true;
            }
            if (on) procs.emplace_back(long(::getpid()), mine);
        }
    }
    if (*count < procs.size()) {
        *count = unsigned(procs.size());
        return kNvmlInsufficientSize;
    }
    if (!procs.empty() && !infos) return kNvmlInvalidArgument;
    for (size_t i = 0; i < procs.size(); ++i)
        infos[i] = tl_nvmlProcessInfo{unsigned(procs[i].first), procs[i].second, 0xFFFFFFFFu, 0xFFFFFFFFu};
    *count = unsigned(procs.size());
    return kNvmlSuccess;
}
