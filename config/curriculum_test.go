package config_test

import (
	"reflect"
	"strings"
	"testing"

	"github.com/grpo-dev/grpo/config"
)

func TestParseSchedule(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want []config.Stage
		err  string
	}{
		{"", nil, ""},
		{"  ", nil, ""},
		{"5@0,10@6,15@11", []config.Stage{{N: 5, From: 0}, {N: 10, From: 6}, {N: 15, From: 11}}, ""},
		{" 5 @ 1 , 10@2", []config.Stage{{N: 5, From: 1}, {N: 10, From: 2}}, ""},
		{"7@0", []config.Stage{{N: 7, From: 0}}, ""},
		{"5@3,10@6", nil, `stage "5@3": the first stage must start at step 0 or 1`},
		{"5@0,10@6,15@6", nil, `stage "15@6": starts at step 6, not after the previous stage's step 6; steps must increase`},
		{"5@0,10@6,15@4", nil, `stage "15@4": starts at step 4`},
		{"1@0", nil, `stage "1@0": n is 1; need at least 2 philosophers`},
		{"5", nil, `stage "5": write n@step, such as 5@0,10@6`},
		{"5@0,", nil, `stage "": write n@step`},
		{"x@0", nil, `stage "x@0": "x" is not a table size`},
		{"5@zero", nil, `stage "5@zero": "zero" is not a step number`},
		{"5@-1", nil, `stage "5@-1": the first stage must start at step 0 or 1`},
	} {
		got, err := config.ParseSchedule(tt.in)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("ParseSchedule(%q)=%v, %v; want error containing %q", tt.in, got, err, tt.err)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, tt.want) {
			t.Errorf("ParseSchedule(%q)=%v, %v; want %v", tt.in, got, err, tt.want)
		}
	}
}

func TestTableSize(t *testing.T) {
	sched := mustParse(t, "curriculum: {schedule: '5@0,10@6,15@11'}")
	late := mustParse(t, "curriculum: {schedule: '4@1,8@3'}\nenv: {n: 6}")
	promote := mustParse(t, "curriculum: {promote: {sizes: [5, 10, 15], threshold: 0.6}}")
	plain := mustParse(t, "env: {n: 7}")
	for _, tt := range []struct {
		name     string
		c        config.Config
		step     int
		promoted int
		want     int
	}{
		{"schedule step 0", sched, 0, 0, 5},
		{"schedule step 5", sched, 5, 0, 5},
		{"schedule step 6", sched, 6, 0, 10},
		{"schedule step 10", sched, 10, 0, 10},
		{"schedule step 11", sched, 11, 0, 15},
		{"schedule step 16", sched, 16, 0, 15},
		{"schedule ignores promotions", sched, 1, 2, 5},
		{"schedule from 1 covers step 0", late, 0, 0, 4},
		{"schedule from 1, step 2", late, 2, 0, 4},
		{"schedule from 1, step 3", late, 3, 0, 8},
		{"promote 0", promote, 4, 0, 5},
		{"promote 1", promote, 4, 1, 10},
		{"promote 2", promote, 4, 2, 15},
		{"promote clamped", promote, 4, 9, 15},
		{"promote negative clamped", promote, 4, -1, 5},
		{"env.n", plain, 3, 0, 7},
		{"env.n ignores promotions", plain, 3, 1, 7},
	} {
		if got := tt.c.TableSize(tt.step, tt.promoted); got != tt.want {
			t.Errorf("%s: TableSize(%d, %d)=%d, want %d", tt.name, tt.step, tt.promoted, got, tt.want)
		}
	}
}
