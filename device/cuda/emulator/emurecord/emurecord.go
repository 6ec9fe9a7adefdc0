// Package emurecord reads the records that tolaria's emulated CUDA driver
// (device/cuda/emulator) keeps when CUDAEMU_STATE names a directory: for
// each of the emulated machine's devices, its size, the most memory its
// processes held at once, and every process that retained its primary
// context, with that process's context bill and peak use. Tests use it to
// check, from the driver's own books, which device each worker used and that
// no device exceeded its memory. It is for tests only: no tolaria program
// imports it.
//
// The format, one file DIR/device-N.state per device N of the machine (its
// number before CUDA_VISIBLE_DEVICES renumbers it), replaced atomically by
// the driver, one record a line:
//
//	# tolaria emulated CUDA device, CUDAEMU_STATE format 1
//	device N total BYTES peak BYTES
//	process PID start TICKS parent PPID context BYTES in_use BYTES peak BYTES alive|gone
//
// Lines starting with '#' are comments. docs/cuda.md describes the fields.
package emurecord

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// Device is one emulated device's record.
type Device struct {
	// Index is the device's number on the emulated machine, as
	// CUDA_VISIBLE_DEVICES names it (and as its PCI bus id reads).
	Index int
	// Total is the device's memory in bytes (CUDAEMU_MEMORY).
	Total uint64
	// Peak is the most bytes the live processes held on the device at once,
	// their contexts' bills included.
	Peak uint64
	// Processes are those that retained the device's primary context, in
	// the order they first did.
	Processes []Process
}

// Process is one process's line in a device's record.
type Process struct {
	PID int
	// Start is the process's start time (field 22 of /proc/PID/stat), which
	// tells it from a later process given the same pid.
	Start  uint64
	Parent int
	// Context is what its primary context was billed while retained (0
	// once released or gone).
	Context uint64
	// InUse is what it held when the record was last written: its device
	// memory and its context's bill.
	InUse uint64
	// Peak is the most it held at once.
	Peak uint64
	// Alive is false once a later write found the process dead (then InUse
	// and Context are 0); true means alive as of the last write, not now:
	// see Running.
	Alive bool
}

// Exceeded says whether the device's processes ever held more than its
// memory at once; the driver refuses such allocations, so true means a bug
// in the driver or processes that disagree on CUDAEMU_MEMORY.
func (d Device) Exceeded() bool { return d.Peak > d.Total }

// Process returns pid's line, if pid retained the device's context.
func (d Device) Process(pid int) (Process, bool) {
	for _, p := range d.Processes {
		if p.PID == pid {
			return p, true
		}
	}
	return Process{}, false
}

// ErrFormat is wrapped by the errors for a record that is not in the format.
var ErrFormat = errors.New("not an emulated CUDA device record")

// Read reads every device record in dir, ordered by device number. A
// directory the driver has not written to yet has none.
func Read(dir string) ([]Device, error) {
	paths, err := filepath.Glob(filepath.Join(dir, "device-*.state"))
	if err != nil {
		return nil, err
	}
	var devs []Device
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		d, err := Parse(bytes.NewReader(b))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
		if want := "device-" + strconv.Itoa(d.Index) + ".state"; filepath.Base(p) != want {
			return nil, fmt.Errorf("%s: holds device %d: %w", p, d.Index, ErrFormat)
		}
		devs = append(devs, d)
	}
	sort.Slice(devs, func(i, j int) bool { return devs[i].Index < devs[j].Index })
	return devs, nil
}

// Parse reads one device's record.
func Parse(r io.Reader) (Device, error) {
	var d Device
	seen := false
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		bad := func(why string) error { return fmt.Errorf("line %d %q: %s: %w", n, line, why, ErrFormat) }
		switch f[0] {
		case "device":
			if seen {
				return d, bad("a second device line")
			}
			v, err := values(f, "device", "total", "peak")
			if err != nil {
				return d, bad(err.Error())
			}
			seen = true
			d.Index, d.Total, d.Peak = int(v[0]), v[1], v[2]
		case "process":
			if len(f) != 13 || (f[12] != "alive" && f[12] != "gone") {
				return d, bad("want process PID start TICKS parent PPID context BYTES in_use BYTES peak BYTES alive|gone")
			}
			v, err := values(f[:12], "process", "start", "parent", "context", "in_use", "peak")
			if err != nil {
				return d, bad(err.Error())
			}
			d.Processes = append(d.Processes, Process{PID: int(v[0]), Start: v[1], Parent: int(v[2]), Context: v[3],
				InUse: v[4], Peak: v[5], Alive: f[12] == "alive"})
		default:
			return d, bad("unknown record " + f[0])
		}
	}
	if err := sc.Err(); err != nil {
		return d, err
	}
	if !seen {
		return d, fmt.Errorf("no device line: %w", ErrFormat)
	}
	return d, nil
}

// values reads fields laid out as "key1 V1 key2 V2 ...", the keys in order.
func values(f []string, keys ...string) ([]uint64, error) {
	if len(f) != 2*len(keys) {
		return nil, fmt.Errorf("want %d fields", 2*len(keys))
	}
	v := make([]uint64, len(keys))
	for i, k := range keys {
		if f[2*i] != k {
			return nil, fmt.Errorf("field %d is %q, want %q", 2*i+1, f[2*i], k)
		}
		n, err := strconv.ParseUint(f[2*i+1], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("%s: %v", k, err)
		}
		v[i] = n
	}
	return v, nil
}

// DevicesOf lists the devices (their Index) whose context pid retained.
func DevicesOf(devs []Device, pid int) []int {
	var out []int
	for _, d := range devs {
		if _, ok := d.Process(pid); ok {
			out = append(out, d.Index)
		}
	}
	return out
}

// Running says whether the process still runs now: its pid is in /proc
// with the recorded start time and is not a zombie, the test the driver
// applies before it counts a process's memory. Linux only; elsewhere false.
func (p Process) Running() bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(p.PID) + "/stat")
	if err != nil {
		return false
	}
	// "pid (comm) state ppid ...": comm may hold spaces and parentheses.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return false
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 20 || f[0] == "Z" || f[0] == "X" {
		return false
	}
	start, err := strconv.ParseUint(f[19], 10, 64) // field 22 of the line
	return err == nil && (p.Start == 0 || start == p.Start)
}
