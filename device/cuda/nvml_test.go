package cuda

import (
	"encoding/binary"
	"strings"
	"testing"
)

// fakeNVMLBuffer lays procs out as NVML fills an nvmlProcessInfo_t array,
// with the instance ids set to MIG's "none" (0xFFFFFFFF) so that a decoder
// reading the wrong offsets would see them.
func fakeNVMLBuffer(procs []nvmlProcess, spare int) []byte {
	buf := make([]byte, (len(procs)+spare)*nvmlProcessInfoSize)
	for i := range buf {
		buf[i] = 0xAB // padding and spare entries hold garbage
	}
	for i, p := range procs {
		e := buf[i*nvmlProcessInfoSize:]
		binary.NativeEndian.PutUint32(e[0:], p.pid)
		binary.NativeEndian.PutUint64(e[8:], p.used)
		binary.NativeEndian.PutUint32(e[16:], 0xFFFFFFFF)
		binary.NativeEndian.PutUint32(e[20:], 0xFFFFFFFF)
	}
	return buf
}

func TestDecodeNVMLProcesses(t *testing.T) {
	want := []nvmlProcess{{pid: 4145, used: 559939584}, {pid: 4146, used: 1 << 40}, {pid: 7, used: nvmlValueNotAvailable}}
	got, err := decodeNVMLProcesses(fakeNVMLBuffer(want, 2), len(want))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Fatalf("decoded %d processes, want %d", len(got), len(want))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("entry %d: decoded %+v, want %+v (the nvmlProcessInfo_t layout: pid at 0, usedGpuMemory at 8, 24 bytes each)", i, got[i], want[i])
		}
	}
	if _, err := decodeNVMLProcesses(fakeNVMLBuffer(want, 0), 4); err == nil || !strings.Contains(err.Error(), "4 processes") {
		t.Errorf("a count past the buffer: err %v, want one naming the count", err)
	}
}

func TestNVMLUsedBy(t *testing.T) {
	procs := []nvmlProcess{{pid: 10, used: 554500096}, {pid: 11, used: 1 << 30}, {pid: 12, used: nvmlValueNotAvailable}}
	for _, c := range []struct {
		pid     int
		want    int64
		errPart string
	}{
		{pid: 10, want: 554500096},
		{pid: 11, want: 1 << 30},
		{pid: 12, errPart: "NVML_VALUE_NOT_AVAILABLE"},
		{pid: 13, errPart: "does not list process 13"},
	} {
		got, err := nvmlUsedBy(procs, c.pid)
		if c.errPart != "" {
			if err == nil || !strings.Contains(err.Error(), c.errPart) {
				t.Errorf("pid %d: %d, %v; want an error containing %q", c.pid, got, err, c.errPart)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("pid %d: %d, %v; want %d", c.pid, got, err, c.want)
		}
	}
}

func TestPCIBusID(t *testing.T) {
	if got := pciBusID(0, 0x65, 0); got != "00000000:65:00.0" {
		t.Errorf("pciBusID(0, 0x65, 0) = %q", got)
	}
}
