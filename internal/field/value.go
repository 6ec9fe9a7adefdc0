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
// may be text such as "256,128". The error does not name the key: the
// caller knows it.
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
		if err != nil {
			return err
		}
		f.SetFloat(x)
	case reflect.Bool:
		b, err := cast.ToBoolE(v)
		if err != nil {
			return err
		}
		f.SetBool(b)
	case reflect.String:
		if _, isList := v.([]any); isList {
			return fmt.Errorf("want one value, not a list")
		}
		s, err := cast.ToStringE(v)
		if err != nil {
			return err
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

// WholeNumber reads an int from a flag, an environment variable or a
// YAML value, refusing a fraction rather than truncating it.
func WholeNumber(v any) (int, error) {
	switch x := v.(type) {
	case string:
		return strconv.Atoi(strings.TrimSpace(x))
	case float64:
		if x != math.Trunc(x) || math.IsInf(x, 0) {
			return 0, fmt.Errorf("%v is not a whole number", x)
		}
		if x < math.MinInt64 || x >= math.MaxInt64 {
			return 0, fmt.Errorf("%v is out of range", x)
		}
		return int(x), nil
	case bool:
		return 0, fmt.Errorf("%v is not a whole number", x)
	}
	return cast.ToIntE(v)
}

// NonNegative reads a whole number from 0 (a seed) as WholeNumber reads
// an int.
func NonNegative(v any) (uint64, error) {
	switch x := v.(type) {
	case string:
		return strconv.ParseUint(strings.TrimSpace(x), 10, 64)
	case float64:
		if x != math.Trunc(x) || math.IsInf(x, 0) || math.IsNaN(x) {
			return 0, fmt.Errorf("%v is not a whole number", x)
		}
		if x < 0 || x >= math.MaxUint64 {
			return 0, fmt.Errorf("%v is out of range: give a whole number from 0", x)
		}
		return uint64(x), nil
	case float32:
		return NonNegative(float64(x))
	case int:
		if x < 0 {
			return 0, fmt.Errorf("%d is out of range: give a whole number from 0", x)
		}
	case bool:
		return 0, fmt.Errorf("%v is not a whole number", x)
	}
	return cast.ToUint64E(v)
}

// WholeNumbers reads a list of whole numbers from text ("256,128",
// "[256,128]") or a list.
func WholeNumbers(v any) ([]int, error) {
	var items []string
	switch x := v.(type) {
	case string:
		x = strings.Trim(strings.TrimSpace(x), "[]")
		if x != "" {
			items = strings.Split(x, ",")
		}
	case []string:
		items = x
	case []int:
		return append([]int{}, x...), nil
	case []any:
		for _, it := range x {
			if f, ok := it.(float64); ok && f != math.Trunc(f) {
				return nil, fmt.Errorf("%v is not a whole number", f)
			}
			items = append(items, fmt.Sprint(it))
		}
	default:
		return nil, fmt.Errorf("want a list of whole numbers such as 256,128")
	}
	sizes := []int{}
	for _, it := range items {
		n, err := strconv.Atoi(strings.TrimSpace(it))
		if err != nil {
			return nil, fmt.Errorf("%q is not a whole number", it)
		}
		sizes = append(sizes, n)
	}
	return sizes, nil
}
