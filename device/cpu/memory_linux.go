//go:build linux

package cpu

import "golang.org/x/sys/unix"

// physicalMemory is the machine's RAM in bytes, or 0 if it cannot be read.
func physicalMemory() int64 {
	var info unix.Sysinfo_t
	if err := unix.Sysinfo(&info); err != nil {
		return 0
	}
	return int64(info.Totalram) * int64(info.Unit)
}
