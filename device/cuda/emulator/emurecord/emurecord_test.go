package emurecord

import (
	"bufio"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/tolaria-ml/tolaria/internal/emutest"
)

const sample = `# tolaria emulated CUDA device, CUDAEMU_STATE format 1
device 1 total 33554432 peak 29360128
process 7726 start 3317248 parent 7720 context 0 in_use 0 peak 25165824 gone
process 7728 start 3317248 parent 7720 context 4194304 in_use 4194304 peak 4194304 alive
`

func TestParse(t *testing.T) {
	d, err := Parse(strings.NewReader(sample))
	if err != nil {
		t.Fatal(err)
	}
	want := Device{Index: 1, Total: 32 << 20, Peak: 28 << 20, Processes: []Process{
		{PID: 7726, Start: 3317248, Parent: 7720, Context: 0, InUse: 0, Peak: 24 << 20, Alive: false},
		{PID: 7728, Start: 3317248, Parent: 7720, Context: 4 << 20, InUse: 4 << 20, Peak: 4 << 20, Alive: true},
	}}
	if !reflect.DeepEqual(d, want) {
		t.Fatalf("Parse = %+v, want %+v", d, want)
	}
	if d.Exceeded() {
		t.Error("Exceeded with a peak below the total")
	}
	if p, ok := d.Process(7728); !ok || p.Peak != 4<<20 {
		t.Errorf("Process(7728) = %+v, %v", p, ok)
	}
	if _, ok := d.Process(1); ok {
		t.Error("Process(1) found a process the record does not list")
	}
	if over := (Device{Total: 10, Peak: 11}); !over.Exceeded() {
		t.Error("Exceeded false with a peak above the total")
	}
}

func TestParseRefusesWhatIsNotARecord(t *testing.T) {
	for name, text := range map[string]string{
		"empty":             "",
		"no device line":    "process 1 start 2 parent 3 context 0 in_use 0 peak 0 alive\n",
		"two device lines":  "device 0 total 1 peak 0\ndevice 0 total 1 peak 0\n",
		"a key out of turn": "device 0 peak 0 total 1\n",
		"not a number":      "device 0 total 1G peak 0\n",
		"a short process":   "device 0 total 1 peak 0\nprocess 1 start 2 parent 3 context 0 in_use 0 peak 0\n",
		"an unknown state":  "device 0 total 1 peak 0\nprocess 1 start 2 parent 3 context 0 in_use 0 peak 0 zombie\n",
		"an unknown record": "device 0 total 1 peak 0\nthread 1\n",
	} {
		if _, err := Parse(strings.NewReader(text)); !errors.Is(err, ErrFormat) {
			t.Errorf("%s: Parse error %v, want ErrFormat", name, err)
		}
	}
}

func TestRead(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if devs, err := Read(dir); err != nil || len(devs) != 0 {
		t.Fatalf("Read of an empty directory = %v, %v", devs, err)
	}
	write("device-1.state", sample)
	write("device-10.state", "device 10 total 5 peak 5\nprocess 7726 start 1 parent 1 context 0 in_use 0 peak 5 gone\n")
	write("device-0.state", "device 0 total 5 peak 0\n")
	write("device-0.lock", "")
	devs, err := Read(dir)
	if err != nil {
		t.Fatal(err)
	}
	var idx []int
	for _, d := range devs {
		idx = append(idx, d.Index)
	}
	if !reflect.DeepEqual(idx, []int{0, 1, 10}) {
		t.Errorf("Read's devices %v, want [0 1 10]", idx)
	}
	if got := DevicesOf(devs, 7726); !reflect.DeepEqual(got, []int{1, 10}) {
		t.Errorf("DevicesOf(7726) = %v, want [1 10]", got)
	}
	write("device-2.state", "device 3 total 5 peak 0\n")
	if _, err := Read(dir); !errors.Is(err, ErrFormat) {
		t.Errorf("Read with device 3's record in device-2.state: %v, want ErrFormat", err)
	}
}

// selfStart is this process's start time from /proc/self/stat.
func selfStart(t *testing.T) uint64 {
	b, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		t.Skipf("no /proc: %v", err)
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	n, err := strconv.ParseUint(f[19], 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func TestRunning(t *testing.T) {
	start := selfStart(t)
	if !(Process{PID: os.Getpid(), Start: start}).Running() {
		t.Error("this process is not Running")
	}
	if (Process{PID: os.Getpid(), Start: start + 1}).Running() {
		t.Error("a process with this pid and another start time is Running")
	}
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Skipf("no sleep: %v", err)
	}
	p := Process{PID: cmd.Process.Pid}
	if !p.Running() {
		t.Error("a sleeping child is not Running")
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	if p.Running() {
		t.Error("a killed child is Running")
	}
}

// TestTheDriversRecords runs processes on the emulated driver with
// CUDAEMU_STATE and reads what the driver recorded of them: the format
// above is the one the driver writes. It needs g++, a C compiler and the
// CUDA headers; without them it skips, or fails when
// TOLARIA_REQUIRE_EMULATION is set.
func TestTheDriversRecords(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", "..", "..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	emu, inc := emutest.Build(t, root, "the emulated CUDA driver")
	prog := filepath.Join(emu, "driver_test")
	if out, err := exec.Command("g++", "-std=c++17", "-O1", "-pthread", "-o", prog,
		filepath.Join(root, "device", "cuda", "emulator", "driver_test.cpp"), "-I", inc, "-L", emu, "-l:libcuda.so.1").CombinedOutput(); err != nil {
		t.Fatalf("building driver_test: %v\n%s", err, out)
	}
	state := t.TempDir()
	const mib = 1 << 20
	type holder struct {
		cmd    *exec.Cmd
		stdin  interface{ Close() error }
		report string
	}
	// hold starts a process that keeps bytes on ordinal 0 of
	// CUDA_VISIBLE_DEVICES=visible until its stdin closes.
	hold := func(visible string, bytes int) *holder {
		cmd := exec.Command(prog, filepath.Join(root, "device", "cuda", "kernels", "tolaria.ptx"), "hold", strconv.Itoa(bytes))
		cmd.Env = append(os.Environ(), "LD_LIBRARY_PATH="+emu, "CUDAEMU_STATE="+state, "CUDAEMU_DEVICES=2",
			"CUDAEMU_MEMORY=64M,32M", "CUDAEMU_CONTEXT_BYTES=1M", "CUDA_VISIBLE_DEVICES="+visible, "CUDAEMU_FAULTS=")
		in, err := cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		line, err := bufio.NewReader(out).ReadString('\n')
		if err != nil {
			t.Fatalf("holder on device %s: %v", visible, err)
		}
		return &holder{cmd, in, strings.TrimSpace(line)}
	}
	a := hold("1", 10*mib)
	b := hold("1", 30*mib)
	c := hold("0", 5*mib)
	if !strings.HasSuffix(a.report, "alloc 0") || !strings.HasSuffix(c.report, "alloc 0") {
		t.Errorf("holders refused: %q, %q", a.report, c.report)
	}
	if want := "retain 0 total 33554432 free 20971520 alloc 2"; b.report != want {
		t.Errorf("the second process on device 1 reported %q, want %q (out of memory)", b.report, want)
	}
	devs, err := Read(state)
	if err != nil {
		t.Fatal(err)
	}
	pa, pb, pc := a.cmd.Process.Pid, b.cmd.Process.Pid, c.cmd.Process.Pid
	for _, w := range []struct {
		pid  int
		devs []int
	}{{pa, []int{1}}, {pb, []int{1}}, {pc, []int{0}}} {
		if got := DevicesOf(devs, w.pid); !reflect.DeepEqual(got, w.devs) {
			t.Errorf("process %d used devices %v, want %v", w.pid, got, w.devs)
		}
	}
	if len(devs) != 2 || devs[1].Total != 32*mib || devs[1].Peak != 12*mib || devs[0].Peak != 6*mib {
		t.Fatalf("devices %+v: want device 1 of 32 MiB peaking at 12 MiB, device 0 at 6 MiB", devs)
	}
	for _, d := range devs {
		if d.Exceeded() {
			t.Errorf("device %d exceeded its memory: %+v", d.Index, d)
		}
	}
	if p, _ := devs[1].Process(pa); p.Peak != 11*mib || p.Context != mib || !p.Alive || !p.Running() {
		t.Errorf("the holder of 10 MiB: %+v", p)
	}
	if err := a.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = a.cmd.Wait()
	for _, h := range []*holder{b, c} {
		h.stdin.Close()
		if err := h.cmd.Wait(); err != nil {
			t.Errorf("holder: %v", err)
		}
	}
	if devs, err = Read(state); err != nil {
		t.Fatal(err)
	}
	p, _ := devs[1].Process(pa)
	if p.Alive || p.InUse != 0 || p.Peak != 11*mib || p.Running() {
		t.Errorf("the killed holder's line after the others wrote: %+v, want gone with its peak kept", p)
	}
	if p, _ := devs[1].Process(pb); !p.Alive || p.InUse != 0 || p.Context != 0 {
		t.Errorf("a holder that released its context and exited: %+v", p)
	}
}
