package device

import "fmt"

// The Check functions validate kernel arguments the same way for every
// backend. They return a plain error describing the first problem; backends
// wrap it as an *Error with ErrMisuse.

func need(name string, b Buffer, n int) error {
	if b.IsZero() {
		return fmt.Errorf("%s is the zero Buffer", name)
	}
	if b.Len() < n {
		return fmt.Errorf("%s has %d elements, needs at least %d", name, b.Len(), n)
	}
	return nil
}

func positive(dims ...int) error {
	for _, d := range dims {
		if d <= 0 {
			return fmt.Errorf("dimensions must be positive, got %v", dims)
		}
	}
	return nil
}

func first(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// CheckGemm validates Gemm's arguments.
func CheckGemm(m, n, k int, a, b, c Buffer) error {
	return first(positive(m, n, k), need("A", a, m*k), need("B", b, k*n), need("C", c, m*n))
}

// CheckAct validates an activation.
func CheckAct(act Activation) error {
	if act < ActNone || act > ActTanh {
		return fmt.Errorf("unknown activation %d", act)
	}
	return nil
}

// CheckBiasAct validates BiasAct's arguments.
func CheckBiasAct(act Activation, rows, cols int, z, bias, y Buffer) error {
	if err := first(CheckAct(act), positive(rows, cols), need("z", z, rows*cols), need("bias", bias, cols), need("y", y, rows*cols)); err != nil {
		return err
	}
	if act != ActNone && z.Allocation() == y.Allocation() && z.Offset() == y.Offset() {
		return fmt.Errorf("y may alias z only for activation none, got %s", act)
	}
	return nil
}

// CheckActGrad validates ActGrad's arguments.
func CheckActGrad(act Activation, rows, cols int, z, dy, dz Buffer) error {
	return first(CheckAct(act), positive(rows, cols), need("z", z, rows*cols), need("dy", dy, rows*cols), need("dz", dz, rows*cols))
}

// CheckLoss validates the arguments of the loss kernels: two rows×cols
// matrices a and out, per-row labels (cols values per row when
// labelsPerRow > 1) and a per-row mask.
func CheckLoss(rows, cols, labelsPerRow int, a, labels, mask, out Buffer) error {
	return first(positive(rows, cols), need("input", a, rows*cols), need("labels", labels, rows*labelsPerRow),
		need("mask", mask, rows), need("output", out, rows*cols))
}

// CheckStats validates a statistics buffer.
func CheckStats(stats Buffer) error { return need("stats", stats, StatsLen) }

// CheckColSum validates ColSum's arguments.
func CheckColSum(rows, cols int, x, out Buffer) error {
	return first(positive(rows, cols), need("x", x, rows*cols), need("out", out, cols))
}

// CheckSame validates that x and y are non-empty and of equal length.
func CheckSame(x, y Buffer) error {
	if err := first(need("x", x, 1), need("y", y, 1)); err != nil {
		return err
	}
	if x.Len() != y.Len() {
		return fmt.Errorf("lengths differ: %d and %d", x.Len(), y.Len())
	}
	return nil
}

// CheckOptimizer validates an optimizer update: the parameter, gradient and
// state buffers have equal lengths and hyper holds HyperLen values.
func CheckOptimizer(p, g Buffer, state []Buffer, hyper Buffer) error {
	if err := CheckSame(p, g); err != nil {
		return err
	}
	for i, s := range state {
		if err := need(fmt.Sprintf("state[%d]", i), s, p.Len()); err != nil {
			return err
		}
		if s.Len() != p.Len() {
			return fmt.Errorf("state[%d] has %d elements, parameters have %d", i, s.Len(), p.Len())
		}
	}
	return need("hyper", hyper, HyperLen)
}
