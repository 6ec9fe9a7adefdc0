package jobserver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"

	"github.com/tolaria-ml/tolaria/device"
	"github.com/tolaria-ml/tolaria/job"
	"github.com/tolaria-ml/tolaria/worker"
)

// ServeKept answers requests read from in one after another, until in
// ends: tolaria-worker serve --keep, a worker a sweep keeps for
// successive trials (worker.Kept). Jobs run on one device, opened for the
// first and kept, with its driver context and the process's graph pool,
// so a later job of the same step signature captures by updating the
// pooled executables. Between jobs the device is reset: the job's
// trainer freed what it allocated, the device gives its cached memory back
// to the driver (device.Trimmer), and it is checked to hold its opening
// figure plus the pool's workspace, with no pool entry leased (else it is
// closed and opened afresh), all before the job's answer, which then
// carries what the process still holds (see end); and before a job the
// pool frees the workspace of every other step (graphs.Pool.Retain), so
// the device holds nothing the job's bill does not count. A job whose device settings
// differ (another device, another thread count) gets a device of its own.
// Any other request is served as Serve serves it, on a device of its own.
func ServeKept(ctx context.Context, in io.Reader, out io.Writer, cfg Config) error {
	if cfg.Shared == nil {
		return errors.New("jobserver: Config.Shared is nil: make one trainer.Shared in main and pass it")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	cfg.kept = &keptDevice{}
	defer cfg.kept.close(cfg)
	l := worker.Listen(in, out)
	for {
		conn, err := l.Accept()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("worker: reading the next request: %w", err)
		}
		if err := serveConn(ctx, conn, cfg); err != nil {
			return err
		}
		if ctx.Err() != nil {
			// Stopped by a signal: the coordinator hears the answer and
			// sees the worker go.
			return nil
		}
	}
}

// keptDevice is a kept worker's device, kept from one job to the next.
type keptDevice struct {
	dev device.Device
	// settings are what the device was opened for (see deviceSettings).
	settings string
	// baseline is the device memory in use once opened, before any job.
	baseline int64
	// contextBytes is what the device held of this process once opened
	// (see contextBytes): each job's bill counts it.
	contextBytes int64
	// jobs counts the jobs served on dev.
	jobs int
}

// deviceSettings are the parts of a job that its device is opened with
// (see Opener): another value needs another device.
func deviceSettings(name string, spec job.Spec) string {
	return fmt.Sprintf("%s threads=%d slow_copy_ms=%g", name, spec.CPUThreads, spec.SlowStageCopyMS)
}

// openFor is the device for req: in a kept worker, a job's is the kept
// device (opened, or opened afresh for other settings), and keptJob is
// true; any other request opens a device of its own, the kept one closed
// first.
func (c Config) openFor(req worker.Request, spec job.Spec) (dev device.Device, keptJob bool, err error) {
	if c.kept == nil || req.Type != worker.TypeStart {
		if c.kept != nil {
			c.kept.close(c)
		}
		dev, err = c.Open(req.Device, spec)
		return dev, false, err
	}
	k := c.kept
	settings := deviceSettings(req.Device, spec)
	if k.dev != nil && k.settings == settings {
		k.jobs++
		c.Logger.Info("serving the job on the kept device", "device", k.dev.Name(), "job", k.jobs)
		return k.dev, true, nil
	}
	k.close(c)
	if dev, err = c.Open(req.Device, spec); err != nil {
		return nil, false, err
	}
	ctxBytes, err := contextBytes(dev, c.Logger)
	if err != nil {
		_ = dev.Close()
		return nil, false, err
	}
	*k = keptDevice{dev: dev, settings: settings, baseline: dev.MemoryStats().DeviceInUse, contextBytes: ctxBytes, jobs: 1}
	return dev, true, nil
}

// after checks, once a job has ended, that the device is back as it was
// opened but for the pool's workspace, with no pool entry leased; if it
// is not, it closes the device, so the next job opens a fresh one. A
// device that keeps freed memory (device.Trimmer: the CUDA pool) first
// gives it back to the driver; it may still hold the job's freed buffers
// that the pooled executables reference (they are freed when the next
// capture updates the executables, or Retain destroys them), which the
// next job's bill counts (see held).
func (k *keptDevice) after(c Config, dev device.Device) {
	if t, ok := dev.(device.Trimmer); ok {
		// What the job freed goes back to the driver, as a process's
		// end would give it, so that the device's other workers see it
		// free.
		if err := t.Trim(); err != nil {
			c.Logger.Warn("giving the kept device's cached memory back failed; closing it, so the next job opens a fresh one", "device", dev.Name(), "err", err)
			k.close(c)
			return
		}
	}
	st := c.Shared.Pool().Stats()
	held := dev.MemoryStats().DeviceInUse - k.baseline
	_, keeps := dev.(device.Trimmer)
	switch {
	case st.LeasedEntries == 0 && held == st.ReservedBytes:
		return
	case st.LeasedEntries == 0 && keeps && held > st.ReservedBytes:
		c.Logger.Info("the kept device's pooled executables hold the job's freed buffers until the next capture; the next job's bill counts them",
			"device", dev.Name(), "held_bytes", held-st.ReservedBytes)
		return
	}
	c.Logger.Warn("the job left the kept device other than it found it; closing it, so the next job opens a fresh one",
		"device", dev.Name(), "held_bytes", held, "pool_bytes", st.ReservedBytes, "leased_entries", st.LeasedEntries)
	k.close(c)
}

// end resets the kept device once a job has ended (see after) and, when
// the device is still kept, records in conn what the process then holds
// on it beyond the pool's workspace (held), for the job's answer to carry
// (worker.Message.HeldBytes): the coordinator books that, with the pool's
// workspace, while the worker waits, and the next job's bill counts it
// again as its context. A device closed by the check holds nothing, and
// conn records that instead (worker.Conn.ClosedDevice), so the
// coordinator books nothing for the worker: its context and pool are
// gone, and its next job opens a fresh device.
func (k *keptDevice) end(c Config, dev device.Device, conn *worker.Conn) {
	k.after(c, dev)
	if k.dev == nil {
		conn.ClosedDevice()
		return
	}
	n, err := k.held(c, dev)
	if err != nil {
		c.Logger.Warn("measuring what the kept device holds after the job failed; the coordinator books what the job's bill says instead",
			"device", dev.Name(), "err", err)
		return
	}
	c.Logger.Info("the kept device waits for the next job", "device", dev.Name(), "held_bytes", n,
		"pool_bytes", c.Shared.Pool().Stats().ReservedBytes)
	conn.Holding(n)
}

// held is what the process holds on the kept device that a job's bill
// does not count otherwise: the context and modules measured at opening,
// and the device memory in use beyond the pool's workspace (an earlier
// job's buffers that pooled executables still reference). Before a job
// (once the pool kept only its step) it is the job's bill's Context; after
// one, what the idle worker holds besides the pool's workspace (end).
func (k *keptDevice) held(c Config, dev device.Device) (int64, error) {
	if t, ok := dev.(device.Trimmer); ok {
		// Retain may have destroyed executables that held freed buffers.
		if err := t.Trim(); err != nil {
			return 0, fmt.Errorf("giving the kept device's cached memory back: %w", err)
		}
	}
	extra := dev.MemoryStats().DeviceInUse - k.baseline - c.Shared.Pool().Stats().ReservedBytes
	return k.contextBytes + max(0, extra), nil
}

// close closes the kept device, if any, dropping the pool's entries of it.
func (k *keptDevice) close(c Config) {
	if k.dev == nil {
		return
	}
	if err := errors.Join(c.Shared.Pool().Drop(k.dev), k.dev.Close()); err != nil {
		c.Logger.Warn("closing the kept device failed", "device", k.dev.Name(), "err", err)
	}
	*k = keptDevice{}
}
