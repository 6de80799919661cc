package script

import (
	"io/fs"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestPartsOnlyDefine checks that every part, at its top level, only
// defines local functions and number constants: nothing runs before a
// script's main, and no table is made there (every call would pay for it).
func TestPartsOnlyDefine(t *testing.T) {
	t.Parallel()
	def := regexp.MustCompile(`^(local function [a-z_]+\(|local [A-Z_, ]+ = [0-9, ]+$|end$)`)
	names, err := fs.Glob(parts, "*.lua")
	require.NoError(t, err)
	require.NotEmpty(t, names)
	for _, name := range names {
		src, err := parts.ReadFile(name)
		require.NoError(t, err)
		for i, line := range strings.Split(string(src), "\n") {
			if line == "" || strings.HasPrefix(line, "--") || strings.HasPrefix(line, " ") {
				continue
			}
			assert.Regexp(t, def, line, "%s:%d runs, or makes a table, at the top level", name, i+1)
		}
	}
}

// TestOnlyParsersReadArguments checks that KEYS and ARGV are read by the
// functions that parse them (request.lua, feedback.lua's parse_feedback)
// and by each script's main, never inside another part.
func TestOnlyParsersReadArguments(t *testing.T) {
	t.Parallel()
	args := regexp.MustCompile(`\b(KEYS|ARGV)\b`)
	names, err := fs.Glob(parts, "*.lua")
	require.NoError(t, err)
	for _, name := range names {
		if name == "request.lua" || name == "feedback.lua" {
			continue
		}
		src, err := parts.ReadFile(name)
		require.NoError(t, err)
		for i, line := range strings.Split(string(src), "\n") {
			code, _, _ := strings.Cut(line, "--")
			assert.NotRegexp(t, args, code, "%s:%d reads the call's arguments", name, i+1)
		}
	}
}

// TestEveryRecipeIsServed checks that each recipe is what one accessor
// returns, and that every part is in a recipe.
func TestEveryRecipeIsServed(t *testing.T) {
	t.Parallel()
	served := map[string]bool{}
	for _, src := range []string{Cancel(), CancelPaced(), CancelAlso(false), CancelAlso(true), CancelCounts(), CancelUnits(), Settle(),
		ReserveParts(), CancelParts(),
		Feedback(), Repair(), LeaseOps(), Lanes(false), Lanes(true), Tenants(false), Tenants(true), CancelLanes()} {
		served[src] = true
	}
	for _, alg := range []string{"log", "paced", "log+also", "paced+also", "fixed", "counter", "buckets"} {
		served[Reserve(alg)], served[Leased(alg)] = true, true
	}
	for _, alg := range []string{"log", "paced", "fixed", "counter", "buckets"} {
		served[Usage(alg)] = true
	}
	delete(served, "")
	used := map[string]bool{}
	for _, r := range recipes {
		assert.True(t, served[scripts[r.name]], "no accessor returns %q", r.name)
		for _, p := range r.parts {
			used[p+".lua"] = true
		}
	}
	assert.Len(t, served, len(recipes))
	names, err := fs.Glob(parts, "*.lua")
	require.NoError(t, err)
	for _, name := range names {
		assert.True(t, used[name], "%s is in no recipe", name)
	}
}
