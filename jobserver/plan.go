package jobserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/tolaria-ml/tolaria/data"
	"github.com/tolaria-ml/tolaria/internal/field"
	"github.com/tolaria-ml/tolaria/job"
	"github.com/tolaria-ml/tolaria/worker"
)

// TypePlan asks a worker to check jobs before anything of them is written:
// it validates each spec, loads its data (once for the specs that name the
// same data, see job.Spec.DataKey) and plans it, opening no device. Its
// body is a PlanJob and its answer a PlanResult. A coordinator that runs
// its jobs in workers so holds no dataset of its own.
const TypePlan = "plan"

// PlanJob is the specs a TypePlan request checks.
type PlanJob struct {
	Specs []job.Spec `json:"specs"`
}

// PlanResult answers a PlanJob: one Planned per spec, in order.
type PlanResult struct {
	Plans []Planned `json:"plans"`
}

// Planned is one spec's check: its refusal, or the files its data was
// read from (data.SourcesOf, none for the synthetic dataset).
type Planned struct {
	// Field and Error are the refusal: the setting at fault (when the
	// refusal names one) and the message; Error is "" for a spec planned.
	Field string            `json:"field,omitempty"`
	Error string            `json:"error,omitempty"`
	Files []data.SourceFile `json:"files,omitempty"`
}

// Err is the refusal as an error: a field.Error when it names a setting,
// so that the command can spell the setting as the user gave it.
func (p Planned) Err() error {
	switch {
	case p.Error == "":
		return nil
	case p.Field != "":
		return field.Errorf(field.Name(p.Field), "%s", p.Error)
	}
	return errors.New(p.Error)
}

// PlanJobs asks the worker behind t to check specs (a TypePlan request).
func PlanJobs(ctx context.Context, t worker.Transport, specs []job.Spec) ([]Planned, error) {
	body, err := json.Marshal(PlanJob{Specs: specs})
	if err != nil {
		return nil, fmt.Errorf("worker: encoding the jobs to plan: %w", err)
	}
	_, res, err := t.Call(ctx, worker.Request{Type: TypePlan, Body: body}, worker.Sink{})
	if err != nil {
		return nil, err
	}
	var pr PlanResult
	if err := json.Unmarshal(res, &pr); err != nil {
		return nil, fmt.Errorf("worker: reading the plans: %w", err)
	}
	if len(pr.Plans) != len(specs) {
		return nil, fmt.Errorf("worker: %d plans for %d jobs", len(pr.Plans), len(specs))
	}
	return pr.Plans, nil
}

// servePlan answers TypePlan: hello, then each spec's check, its data
// loads counted as progress.
func servePlan(conn *worker.Conn, cfg Config) error {
	var pj PlanJob
	if err := json.Unmarshal(conn.Request().Body, &pj); err != nil {
		return conn.Fail(usage(fmt.Sprintf("the jobs to plan cannot be read: %v", err)))
	}
	hello := worker.Hello{Device: "none", Description: fmt.Sprintf("planning %d jobs", len(pj.Specs)), Build: cfg.Build, PID: os.Getpid(), Advances: true}
	if err := conn.Hello(hello); err != nil {
		return err
	}
	type sets struct {
		train, test data.Examples
		err         error
	}
	loaded := map[string]sets{}
	res := PlanResult{Plans: make([]Planned, len(pj.Specs))}
	for i, spec := range pj.Specs {
		if err := spec.Validate(); err != nil {
			res.Plans[i] = refused(err)
			continue
		}
		key := spec.DataKey()
		d, ok := loaded[key]
		if !ok {
			d.train, d.test, d.err = spec.LoadDataAdvancing(conn.Advance)
			loaded[key] = d
		}
		if d.err != nil {
			res.Plans[i] = refused(d.err)
			continue
		}
		if _, err := spec.Plan(d.train, d.test); err != nil {
			res.Plans[i] = refused(err)
			continue
		}
		res.Plans[i] = Planned{Files: data.SourcesOf(d.train, d.test)}
	}
	return conn.Result(res)
}

// refused is a spec's refusal as a Planned: the setting it names, if any,
// and its message without the setting's prefix.
func refused(err error) Planned {
	var fe *field.Error
	if errors.As(err, &fe) && err == error(fe) {
		return Planned{Field: string(fe.Field), Error: strings.TrimPrefix(fe.Error(), string(fe.Field)+": ")}
	}
	return Planned{Error: err.Error()}
}
