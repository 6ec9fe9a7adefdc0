package field

import (
	"fmt"
	"math"
	"reflect"
	"strconv"
	"strings"

	"github.com/spf13/cast"
)

// Assign reads v, as a flag or an environment variable (text) or a YAML
// file (typed) gives it, into *dst: an int, a uint64, a float64, a bool,
// a string (or a type of one of those kinds) or a []int. Whole numbers
// refuse fractions (3.7 is an error, not 3), and a list of whole numbers
// may be text such as "256,128". The error says what the value must be
// and what it was, without the key: the caller names it
// (Errorf(key, "%w", err)).
func Assign(dst any, v any) error {
	f := reflect.ValueOf(dst)
	if f.Kind() != reflect.Pointer || f.IsNil() {
		return fmt.Errorf("field.Assign: %T is not a pointer", dst)
	}
	f = f.Elem()
	switch f.Kind() {
	case reflect.Int, reflect.Int64:
		n, err := WholeNumber(v)
		if err != nil {
			return err
		}
		f.SetInt(int64(n))
	case reflect.Uint64:
		n, err := NonNegative(v)
		if err != nil {
			return err
		}
		f.SetUint(n)
	case reflect.Float64:
		x, err := cast.ToFloat64E(v)
		if _, isBool := v.(bool); err != nil || isBool {
			return fmt.Errorf("must be a number, got %s", spell(v))
		}
		f.SetFloat(x)
	case reflect.Bool:
		b, err := cast.ToBoolE(v)
		if err != nil {
			return fmt.Errorf("must be true or false, got %s", spell(v))
		}
		f.SetBool(b)
	case reflect.String:
		switch v.(type) {
		case []any, map[string]any:
			return fmt.Errorf("must be one value, got %s", spell(v))
		}
		s, err := cast.ToStringE(v)
		if err != nil {
			return fmt.Errorf("must be text, got %s", spell(v))
		}
		f.SetString(s)
	case reflect.Slice:
		if f.Type().Elem().Kind() != reflect.Int {
			return fmt.Errorf("field.Assign: cannot set a %s", f.Type())
		}
		sizes, err := WholeNumbers(v)
		if err != nil {
			return err
		}
		f.Set(reflect.ValueOf(sizes))
	default:
		return fmt.Errorf("field.Assign: cannot set a %s", f.Type())
	}
	return nil
}

// spell is a value as an error shows it: text quoted, anything else as
// it prints.
func spell(v any) string {
	if s, ok := v.(string); ok {
		return strconv.Quote(s)
	}
	return fmt.Sprint(v)
}

// notWhole is the refusal of v where a whole number goes.
func notWhole(v any) error { return fmt.Errorf("must be a whole number, got %s", spell(v)) }

// WholeNumber reads an int from a flag, an environment variable or a
// YAML value, refusing a fraction rather than truncating it.
func WholeNumber(v any) (int, error) {
	switch x := v.(type) {
	case string:
		n, err := strconv.Atoi(strings.TrimSpace(x))
		if err != nil {
			return 0, notWhole(v)
		}
		return n, nil
	case float64:
		if x != math.Trunc(x) || math.IsInf(x, 0) {
			return 0, notWhole(v)
		}
		if x < math.MinInt64 || x >= math.MaxInt64 {
			return 0, fmt.Errorf("must be a whole number in range, got %v", x)
		}
		return int(x), nil
	case bool:
		return 0, notWhole(v)
	}
	n, err := cast.ToIntE(v)
	if err != nil {
		return 0, notWhole(v)
	}
	return n, nil
}

// NonNegative reads a whole number from 0 (a seed) as WholeNumber reads
// an int.
func NonNegative(v any) (uint64, error) {
	switch x := v.(type) {
	case string:
		n, err := strconv.ParseUint(strings.TrimSpace(x), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("must be a whole number from 0, got %s", spell(v))
		}
		return n, nil
	case float64:
		if x != math.Trunc(x) || math.IsInf(x, 0) || math.IsNaN(x) {
			return 0, notWhole(v)
		}
		if x < 0 || x >= math.MaxUint64 {
			return 0, fmt.Errorf("must be a whole number from 0, got %v", x)
		}
		return uint64(x), nil
	case float32:
		return NonNegative(float64(x))
	case int:
		if x < 0 {
			return 0, fmt.Errorf("must be a whole number from 0, got %d", x)
		}
	case bool:
		return 0, notWhole(v)
	}
	n, err := cast.ToUint64E(v)
	if err != nil {
		return 0, notWhole(v)
	}
	return n, nil
}

// WholeNumbers reads a list of whole numbers from text ("256,128",
// "[256,128]") or a list.
func WholeNumbers(v any) ([]int, error) {
	var items []any
	switch x := v.(type) {
	case string:
		x = strings.Trim(strings.TrimSpace(x), "[]")
		if x != "" {
			for _, it := range strings.Split(x, ",") {
				items = append(items, strings.TrimSpace(it))
			}
		}
	case []string:
		for _, it := range x {
			items = append(items, it)
		}
	case []int:
		return append([]int{}, x...), nil
	case []any:
		items = x
	default:
		return nil, fmt.Errorf("must be a list of whole numbers such as 256,128, got %s", spell(v))
	}
	sizes := []int{}
	for _, it := range items {
		n, err := WholeNumber(it)
		if err != nil {
			return nil, err
		}
		sizes = append(sizes, n)
	}
	return sizes, nil
}
