package rundir

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/tolaria-ml/tolaria/coordinator/refusal"
	"github.com/tolaria-ml/tolaria/internal/field"
	"github.com/tolaria-ml/tolaria/job"
)

// Spec reads the job a run directory's config.yaml records: in the
// nested layout job.Spec.ConfigFile writes, or in the flat one of a run
// made by an earlier release (read as it is, without a warning: the run,
// not the user, wrote it).
func Spec(dir string) (job.Spec, error) {
	if err := CheckKind(dir, UseRead); err != nil {
		return job.Spec{}, err
	}
	path := filepath.Join(dir, ConfigFile)
	if _, err := os.Stat(path); err != nil {
		return job.Spec{}, refusal.Config(field.Errorf("run_dir", "%s has no %s, so it is not a tolaria run; point it at a run made by tolaria train", dir, ConfigFile))
	}
	settings, err := job.ReadConfigFile(path, nil)
	if err != nil {
		return job.Spec{}, refusal.Config(err)
	}
	spec := job.Default()
	if err := settings.Apply(&spec); err != nil {
		return job.Spec{}, refusal.Config(fmt.Errorf("%s: %w", path, err))
	}
	spec.Resume, spec.RunDir = false, dir
	if err := spec.Validate(); err != nil {
		return job.Spec{}, refusal.Config(fmt.Errorf("%s: %w", path, settings.Spell(err)))
	}
	return spec, nil
}
