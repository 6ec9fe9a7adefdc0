package trainer

// Observer receives the trainer's measurements as they happen. The trainer
// knows nothing of Prometheus: telemetry turns measurements into metrics
// and the events log, and a worker forwards each one to the coordinator
// (see EncodeMeasurement). Observe must be safe for concurrent use and must
// not block; an Observer ignores the kinds of measurement it has no use
// for.
type Observer interface {
	Observe(m Measurement)
}

// ObserverFunc is a function used as an Observer.
type ObserverFunc func(Measurement)

// Observe calls f(m).
func (f ObserverFunc) Observe(m Measurement) { f(m) }

// NopObserver ignores every measurement.
type NopObserver struct{}

// Observe does nothing.
func (NopObserver) Observe(Measurement) {}

// Tee returns an Observer that passes every measurement to each of
// observers in order; nil observers are skipped.
func Tee(observers ...Observer) Observer {
	var t tee
	for _, o := range observers {
		if o != nil {
			t = append(t, o)
		}
	}
	return t
}

type tee []Observer

func (t tee) Observe(m Measurement) {
	for _, o := range t {
		o.Observe(m)
	}
}
