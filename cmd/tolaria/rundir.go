package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/tolaria-ml/tolaria/job"
	"github.com/tolaria-ml/tolaria/trainer"
)

// Files of a run directory.
const (
	configFile  = "config.yaml"
	eventsFile  = "events.jsonl"
	summaryFile = "summary.json"
)

// planRunDir checks the run directory before anything is written: a fresh
// run refuses a directory that already holds a run, so nothing of an
// earlier run is overwritten; a resumed run needs its checkpoint. It names
// the default directory (runs/<time>) without creating it, and reports
// whether it did.
func planRunDir(spec *job.Spec, now time.Time) (generated bool, err error) {
	if spec.RunDir == "" {
		if spec.Resume {
			return false, usagef("resume: needs --run-dir pointing at the run to resume")
		}
		spec.RunDir = filepath.Join("runs", now.UTC().Format("20060102-150405"))
		return true, nil
	}
	if owner, busy := runDirBusy(spec.RunDir); busy {
		return false, usagef("run-dir: %s is in use by another tolaria (%s); wait for it or choose another --run-dir", spec.RunDir, owner)
	}
	return false, checkRunDir(*spec)
}

// runDirBusy reports whether another process holds the run directory's
// lock, and what it wrote there.
func runDirBusy(dir string) (string, bool) {
	f, err := os.Open(filepath.Join(dir, lockFile))
	if err != nil {
		return "", false
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_SH|syscall.LOCK_NB); err != nil {
		owner, _ := os.ReadFile(f.Name())
		return strings.TrimSpace(string(owner)), true
	}
	return "", false
}

func checkRunDir(spec job.Spec) error {
	ck := filepath.Join(spec.RunDir, trainer.CheckpointFile)
	_, err := os.Stat(ck)
	switch {
	case spec.Resume && errors.Is(err, os.ErrNotExist):
		return usagef("resume: %s has no checkpoint (%s); start without --resume or point --run-dir at an earlier run", spec.RunDir, trainer.CheckpointFile)
	case !spec.Resume && err == nil:
		return usagef("run-dir: %s already holds a run (%s); pass --resume to continue it, or choose another --run-dir", spec.RunDir, trainer.CheckpointFile)
	}
	return nil
}

// lockFile marks a run directory in use; flock releases it when the
// process ends, however it ends.
const lockFile = ".tolaria.lock"

// claimRunDir creates the run directory (a generated name gets a suffix
// rather than sharing a directory with a run started in the same second),
// locks it against a second tolaria, and checks it again under the lock.
// The returned function releases the lock.
func claimRunDir(spec *job.Spec, generated bool) (func(), error) {
	if generated {
		base := spec.RunDir
		if err := os.MkdirAll(filepath.Dir(base), 0o755); err != nil {
			return nil, usagef("run-dir: %v", err)
		}
		for i := 2; ; i++ {
			err := os.Mkdir(spec.RunDir, 0o755)
			if err == nil {
				break
			}
			if !errors.Is(err, os.ErrExist) || i > 1000 {
				return nil, usagef("run-dir: %v", err)
			}
			spec.RunDir = fmt.Sprintf("%s-%d", base, i)
		}
	} else if err := os.MkdirAll(spec.RunDir, 0o755); err != nil {
		return nil, usagef("run-dir: %v", err)
	}
	f, err := os.OpenFile(filepath.Join(spec.RunDir, lockFile), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, usagef("run-dir: %v", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		owner, _ := os.ReadFile(f.Name())
		f.Close()
		return nil, usagef("run-dir: %s is in use by another tolaria (%s); wait for it or choose another --run-dir",
			spec.RunDir, strings.TrimSpace(string(owner)))
	}
	_ = f.Truncate(0)
	fmt.Fprintf(f, "pid %d", os.Getpid())
	if err := checkRunDir(*spec); err != nil {
		f.Close()
		return nil, err
	}
	return func() { f.Close() }, nil
}

// writeConfig records the resolved configuration, in the layout of a
// --config file. A resumed run keeps the original config.yaml (it is the
// base of the resumed configuration) and records its own next to it.
func writeConfig(spec job.Spec) (string, error) {
	m, err := configMap(spec)
	if err != nil {
		return "", err
	}
	raw, err := yaml.Marshal(m)
	if err != nil {
		return "", err
	}
	name := configFile
	if spec.Resume {
		name = fmt.Sprintf("config.resume-%s.yaml", time.Now().UTC().Format("20060102-150405.000"))
	}
	path := filepath.Join(spec.RunDir, name)
	return path, writeFileAtomic(path, raw)
}

func writeSummary(path string, s trainer.Summary) error {
	raw, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	return writeFileAtomic(path, append(raw, '\n'))
}

// writeFileAtomic writes through a temporary file and a rename, so a
// reader never sees half a file and a crash never leaves one.
func writeFileAtomic(path string, raw []byte) error {
	if dir := filepath.Dir(path); dir != "" {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(raw); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
