package rundir

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"

	"github.com/tolaria-ml/tolaria/coordinator/refusal"
	"github.com/tolaria-ml/tolaria/internal/field"
	"github.com/tolaria-ml/tolaria/job"
)

// Spec reads the job a run directory's config.yaml records.
func Spec(dir string) (job.Spec, error) {
	path := filepath.Join(dir, ConfigFile)
	if _, err := os.Stat(path); err != nil {
		return job.Spec{}, refusal.Config(field.Errorf("run_dir", "%s has no %s, so it is not a tolaria run; point it at a run made by tolaria train", dir, ConfigFile))
	}
	m, err := job.ReadConfigFile(path, nil)
	if err != nil {
		return job.Spec{}, refusal.Config(err)
	}
	spec := job.Default()
	settings := job.Settings(m)
	// In the order of their keys, as a sweep applies a trial's.
	for _, k := range slices.Sorted(maps.Keys(settings)) {
		if err := spec.Set(k, settings[k]); err != nil {
			return job.Spec{}, refusal.Config(fmt.Errorf("%s: %w", path, err))
		}
	}
	spec.Resume, spec.RunDir = false, dir
	if err := spec.Validate(); err != nil {
		return job.Spec{}, refusal.Config(fmt.Errorf("%s: %w", path, err))
	}
	return spec, nil
}
