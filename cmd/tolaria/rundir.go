package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
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

// prepareRunDir checks the run directory before anything is written: a
// fresh run refuses a directory that already holds a run, so nothing of an
// earlier run is overwritten; a resumed run needs its checkpoint.
func prepareRunDir(spec *job.Spec, now time.Time) error {
	if spec.RunDir == "" {
		if spec.Resume {
			return usagef("resume: needs --run-dir pointing at the run to resume")
		}
		spec.RunDir = filepath.Join("runs", now.UTC().Format("20060102-150405"))
	}
	ck := filepath.Join(spec.RunDir, trainer.CheckpointFile)
	_, err := os.Stat(ck)
	switch {
	case spec.Resume && errors.Is(err, os.ErrNotExist):
		return usagef("resume: %s has no checkpoint (%s); start without --resume or point --run-dir at an earlier run", spec.RunDir, trainer.CheckpointFile)
	case !spec.Resume && err == nil:
		return usagef("run-dir: %s already holds a run (%s); pass --resume to continue it, or choose another --run-dir", spec.RunDir, trainer.CheckpointFile)
	}
	if err := os.MkdirAll(spec.RunDir, 0o755); err != nil {
		return usagef("run-dir: %v", err)
	}
	return nil
}

// writeConfig records the resolved configuration. A resumed run keeps the
// original config.yaml and records its own next to it.
func writeConfig(spec job.Spec) (string, error) {
	raw, err := yaml.Marshal(spec)
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
	return os.Rename(tmp.Name(), path)
}
