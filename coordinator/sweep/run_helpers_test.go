package sweep

import (
	"context"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/tolaria-ml/tolaria/coordinator/train"
	"github.com/tolaria-ml/tolaria/job"
	"github.com/tolaria-ml/tolaria/trainer"
)

// The single run's own tests are in package train; these helpers train
// the runs a sweep's trials are compared with.

func request(t *testing.T, spec job.Spec) train.Request {
	shared := trainer.NewShared()
	t.Cleanup(func() { shared.Close() })
	return train.Request{Spec: spec, Shared: shared, Version: "test", Started: time.Now()}
}

// trainRun prepares, trains and records a run, as tolaria train does.
func trainRun(t *testing.T, req train.Request) (*train.Run, trainer.Summary) {
	t.Helper()
	r, err := train.Prepare(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	sum, err := r.Train(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Record(&sum); err != nil {
		t.Fatal(err)
	}
	return r, sum
}

// get is the body of a GET of url.
func get(t *testing.T, url string) string {
	t.Helper()
	client := &http.Client{Timeout: 10 * time.Second}
	resp, err := client.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d, %v", url, resp.StatusCode, err)
	}
	return string(raw)
}
