package throttle

import "reflect"

// isNilPointer reports whether v, a non-nil interface, holds a nil pointer
// (or another nil reference): a typed nil that would panic at request time,
// so New refuses it.
func isNilPointer(v any) bool {
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.Pointer, reflect.Map, reflect.Slice, reflect.Func, reflect.Chan, reflect.Interface:
		return rv.IsNil()
	}
	return false
}
