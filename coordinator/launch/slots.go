package launch

import (
	"context"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/tolaria-ml/tolaria/coordinator/refusal"
	"github.com/tolaria-ml/tolaria/internal/field"
)

// Slot is a place on a device for one worker at a time.
type Slot struct {
	Device string // cpu or cuda
	// GPU is the CUDA device of this machine a cuda slot's worker sees
	// alone, as device 0 (CUDA_VISIBLE_DEVICES); -1 leaves it the GPUs its
	// environment gives it.
	GPU int
	// Where names the scheduler that places the worker (slurm); "" is
	// this machine.
	Where string
}

// Remote says whether a scheduler places the slot's worker elsewhere,
// on a device of its own: this machine's device-memory books do not
// cover it.
func (s Slot) Remote() bool { return s.Where != "" }

func (s Slot) String() string {
	switch {
	case s.Remote():
		return s.Where + ":" + s.Device
	case s.Device == "cuda" && s.GPU >= 0:
		return "cuda:" + strconv.Itoa(s.GPU)
	}
	return s.Device
}

// Env is the environment a worker gets on the slot under this process's
// CUDA_VISIBLE_DEVICES (see EnvUnder).
func (s Slot) Env() []string { return s.EnvUnder(os.Getenv("CUDA_VISIBLE_DEVICES")) }

// EnvUnder is the environment a worker gets on the slot when this process
// sees the GPUs visible lists (CUDA_VISIBLE_DEVICES; "" for all): a GPU
// slot's worker sees its GPU alone, as device 0. Slot.GPU numbers the GPUs
// as this process's driver does, so GPU k is visible's k-th entry (an index
// or a UUID, handed on as written); with visible "" it is the machine's
// device k.
func (s Slot) EnvUnder(visible string) []string {
	if s.Device != "cuda" || s.Remote() || s.GPU < 0 {
		return nil
	}
	entry := strconv.Itoa(s.GPU)
	if visible = strings.TrimSpace(visible); visible != "" {
		if list := strings.Split(visible, ","); s.GPU < len(list) {
			entry = strings.TrimSpace(list[s.GPU])
		}
	}
	return []string{"CUDA_VISIBLE_DEVICES=" + entry}
}

// LayOut lays out the slots of device (cpu or cuda) on gpus (none: one
// device, the CUDA one unnamed): per of them per device (0: one on a GPU
// named, parallel on the CPU or the unnamed GPU), interleaved so workers
// spread over the devices, parallel in all (0: every slot).
func LayOut(device string, gpus []int, per, parallel int) ([]Slot, error) {
	devices := []int{-1}
	if device == "cuda" && len(gpus) > 0 {
		devices = gpus
	}
	if per == 0 {
		per = 1
		if device == "cpu" || devices[0] < 0 {
			per = max(parallel, 1)
		}
	}
	if parallel == 0 {
		parallel = len(devices) * per
	}
	if parallel > len(devices)*per {
		return nil, refusal.Config(field.Errorf("parallel", "%d is more than the %d device slots (%d devices times %s %d); raise %s or lower %s",
			parallel, len(devices)*per, len(devices), field.Name("per_device"), per, field.Name("per_device"), field.Name("parallel")))
	}
	var slots []Slot
	for k := 0; k < per && len(slots) < parallel; k++ {
		for _, g := range devices {
			if len(slots) < parallel {
				slots = append(slots, Slot{Device: device, GPU: g})
			}
		}
	}
	return slots, nil
}

// Slots is the one device-slot allocator: a worker takes a free slot
// before it starts and gives it back once it has ended, so no more
// workers run on a device than it has slots.
type Slots struct {
	all  []Slot
	mu   sync.Mutex
	free []Slot        // in the order given back: the longest free first
	gave chan struct{} // closed and replaced whenever a slot is given back
}

// NewSlots makes an allocator of the slots, all free.
func NewSlots(all []Slot) *Slots {
	return &Slots{all: all, free: slices.Clone(all), gave: make(chan struct{})}
}

// Take waits for a free slot, or for ctx to end.
func (s *Slots) Take(ctx context.Context) (Slot, error) { return s.TakeWhere(ctx, nil) }

// TakeOn waits for a free slot on GPU gpu (Slot.GPU), or for ctx to end:
// an activity that places a worker beside another (an RL agent's actor
// beside its learner) or by a rule of its own (agent % devices).
func (s *Slots) TakeOn(ctx context.Context, gpu int) (Slot, error) {
	return s.TakeWhere(ctx, func(sl Slot) bool { return sl.GPU == gpu })
}

// TakeWhere waits for the first free slot that fits (every slot when fits
// is nil), or for ctx to end.
func (s *Slots) TakeWhere(ctx context.Context, fits func(Slot) bool) (Slot, error) {
	for {
		if err := ctx.Err(); err != nil {
			return Slot{}, err
		}
		s.mu.Lock()
		for i, sl := range s.free {
			if fits == nil || fits(sl) {
				s.free = slices.Delete(s.free, i, i+1)
				s.mu.Unlock()
				return sl, nil
			}
		}
		gave := s.gave
		s.mu.Unlock()
		select {
		case <-gave:
		case <-ctx.Done():
			return Slot{}, ctx.Err()
		}
	}
}

// Give returns a slot taken.
func (s *Slots) Give(sl Slot) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.free = append(s.free, sl)
	close(s.gave)
	s.gave = make(chan struct{})
}

// Len is the number of slots: how many workers run at once.
func (s *Slots) Len() int { return len(s.all) }

// Devices says where the slots are, each once: "cpu", "cuda:0, cuda:1".
func (s *Slots) Devices() string {
	seen := map[string]bool{}
	var out []string
	for _, sl := range s.all {
		if !seen[sl.String()] {
			seen[sl.String()] = true
			out = append(out, sl.String())
		}
	}
	return strings.Join(out, ", ")
}

// CPUThreads is how many kernel threads a worker on a CPU slot gets: the
// job's own cpu_threads when it sets one (set), else the cores (the
// coordinator's GOMAXPROCS, which is also what a worker's CPU device takes
// by default) divided between the workers running side by side on this
// machine's CPU, at least one. Each worker's helpers spin between kernels,
// so workers that each took every core would take turns at them.
func CPUThreads(set, cores, sideBySide int) int {
	if set > 0 {
		return set
	}
	return max(1, cores/max(1, sideBySide))
}
