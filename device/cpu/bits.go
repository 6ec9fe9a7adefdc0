package cpu

import (
	"fmt"
	"math"
	"time"
)

func float32FromBits(b uint32) float32 { return math.Float32frombits(b) }

func sleep(d time.Duration) { time.Sleep(d) }

func first(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

func errorf(format string, args ...any) error { return fmt.Errorf(format, args...) }
