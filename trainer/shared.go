package trainer

import (
	"errors"
	"fmt"
	"reflect"
	"sync"

	"github.com/tolaria-ml/tolaria/device"
	"github.com/tolaria-ml/tolaria/graphs"
	"github.com/tolaria-ml/tolaria/staging"
)

// Shared is what the trainers of one process share, made once by main and
// passed down to every Run (tolaria, tolaria-worker and run_graph_bench
// each make one):
//
//   - the graph pool, from which a trainer with GraphPoolReuse leases its
//     workspace and executables, so a later trainer of the same step
//     signature captures by updating them rather than instantiating;
//   - the capture guard that every stager honours: CUDA's global capture
//     mode spans the process, so a capture anywhere in it must keep every
//     stager's device calls out (see staging.Guard);
//   - the devices being trained on. A global-mode capture is broken by an
//     unsafe call (an event or stream synchronisation, a pinned
//     allocation) from any thread, and a trainer makes such calls outside
//     its own captures, so two trainers at once on one device would break
//     each other's captures. One job per device per process is tolaria's
//     design: further jobs run in worker processes of their own. Runs one
//     after the other share a device, and through the pool its captures.
//     (Trainers on two GPUs of one process could still break each other's
//     captures; tolaria gives each GPU a worker process of its own, and
//     this check does not look across devices.)
//
// It is safe for concurrent use.
type Shared struct {
	pool  *graphs.Pool
	guard *staging.Guard

	mu   sync.Mutex
	busy map[device.Device]bool
}

// NewShared returns the state for one process; Close releases its pool.
func NewShared() *Shared {
	return &Shared{pool: graphs.NewPool(), guard: new(staging.Guard), busy: map[device.Device]bool{}}
}

// Pool is the process's graph pool.
func (s *Shared) Pool() *graphs.Pool { return s.pool }

// Guard is the process's capture guard.
func (s *Shared) Guard() *staging.Guard { return s.guard }

// Close closes the pool, destroying the executables it holds.
func (s *Shared) Close() error { return s.pool.Close() }

// ErrDeviceBusy is returned by Run for a device that another Run of the
// same process is training on.
var ErrDeviceBusy = errors.New("trainer: the device is already training in this process")

// claim marks dev as training until release is called, or refuses it
// with ErrDeviceBusy.
func (s *Shared) claim(dev device.Device) (release func(), err error) {
	if !reflect.TypeOf(dev).Comparable() {
		return func() {}, nil // cannot be a map key; not tracked
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.busy[dev] {
		return nil, fmt.Errorf("%w: device %s (%s) runs one job at a time per process; run the other job in a worker process of its own (tolaria train --isolate)",
			ErrDeviceBusy, dev.Name(), dev.Description())
	}
	s.busy[dev] = true
	return func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		delete(s.busy, dev)
	}, nil
}
