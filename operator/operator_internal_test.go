package operator

import (
	"reflect"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/throttle-go/throttle/internal/contract"
)

// TestUsageOfCopiesEveryField: every field of the store's usage has a field
// of the same name in KeyUsage (and LimitUsage), and usageOf copies it (the
// fields of the leases are read apart): a
// field added to one and not the other fails here.
func TestUsageOfCopiesEveryField(t *testing.T) {
	t.Parallel()
	lim := contract.Limit{N: 7, Per: time.Second}
	in := contract.Usage{Algorithm: contract.Buckets, Limits: []contract.LimitUsage{{Limit: lim, Used: 1, Reserved: 2, Previous: 3}},
		Next: 4, NextCause: contract.CauseLearned, NextLimit: 5, Capped: true, Entries: 6, Last: 7, Pause: 8,
		Learned: contract.Limit{N: 9, Per: time.Minute}, LearnedFor: 10, LearnedPace: contract.Limit{N: 1, Per: 11, Paced: true, Burst: 2},
		LearnedPaceFor: 12, Budget: 13, BudgetReset: 14, LearnedPaceChanged: 15, LearnedPaceProbed: 16, PaceProbed: true,
		LearnedMargin: 17, LearnedMarginFor: 18, LearnedMarginChanged: 19}
	out := usageOf(in)
	assert.Equal(t, CauseLearned, out.NextCause)

	iv, ov := reflect.ValueOf(in), reflect.ValueOf(out)
	// and five of the cap in flight, read apart (contract.LeaseUsage).
	require.Equal(t, iv.NumField()+5, ov.NumField(), "KeyUsage has a field per field of the store's usage")
	for i := range iv.NumField() {
		name := iv.Type().Field(i).Name
		o := ov.FieldByName(name)
		require.True(t, o.IsValid(), "KeyUsage has no %s", name)
		switch name {
		case "NextCause", "Limits":
			continue
		}
		assert.False(t, iv.Field(i).IsZero(), "the test sets %s", name)
		assert.Equal(t, iv.Field(i).Interface(), as(o, iv.Field(i).Type()), name)
	}
	li, lo := reflect.ValueOf(in.Limits[0]), reflect.ValueOf(out.Limits[0])
	require.Equal(t, li.NumField(), lo.NumField())
	for i := range li.NumField() {
		name := li.Type().Field(i).Name
		assert.Equal(t, li.Field(i).Interface(), as(lo.FieldByName(name), li.Field(i).Type()), name)
	}
}

// TestCauses: each cause a store reports maps to its own; the slot's order
// and the in-flight cap, which Usage never reports, to none.
func TestCauses(t *testing.T) {
	t.Parallel()
	for in, want := range map[contract.Cause]Cause{
		contract.CauseNone: CauseNone, contract.CauseLimit: CauseLimit, contract.CauseUpstream: CauseUpstream,
		contract.CauseLearned: CauseLearned, contract.CauseOrder: CauseNone, contract.CauseInFlight: CauseNone,
	} {
		assert.Equal(t, want, usageOf(contract.Usage{NextCause: in}).NextCause, in.String())
	}
}

// as is v converted to t (a public type such as throttle.Limit to the
// store's twin of it), as an interface value.
func as(v reflect.Value, t reflect.Type) any {
	if v.Type() != t && v.Type().ConvertibleTo(t) {
		v = v.Convert(t)
	}
	return v.Interface()
}
