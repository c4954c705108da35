package grpo_test

import (
	"strings"
	"testing"

	"github.com/grpo-dev/grpo/grpo"
)

func TestAdvantages(t *testing.T) {
	var (
		grpoOpt   = grpo.DefaultAdvantageOptions()
		unbiased  = grpo.AdvantageOptions{StdNormalize: true, Std: grpo.StdUnbiased, Baseline: grpo.BaselineMean}
		drGRPO    = grpo.AdvantageOptions{StdNormalize: false, Std: grpo.StdPopulation, Baseline: grpo.BaselineMean}
		rloo      = grpo.AdvantageOptions{StdNormalize: false, Std: grpo.StdPopulation, Baseline: grpo.BaselineLeaveOneOut}
		rlooPop   = grpo.AdvantageOptions{StdNormalize: true, Std: grpo.StdPopulation, Baseline: grpo.BaselineLeaveOneOut}
		rlooUnbia = grpo.AdvantageOptions{StdNormalize: true, Std: grpo.StdUnbiased, Baseline: grpo.BaselineLeaveOneOut}
	)
	for _, tt := range []struct {
		name    string
		rewards []float64
		opt     grpo.AdvantageOptions
		want    []float64
	}{
		// [1,0,0]: mean 1/3, population std sqrt(2)/3 = 0.4714045,
		// (2/3)/(0.4714045+1e-6) = 1.4142106, (-1/3)/(0.4714045+1e-6) = -0.7071053.
		{"Population", []float64{1, 0, 0}, grpoOpt, []float64{1.4142105624, -0.7071052812, -0.7071052812}},
		// Unbiased std sqrt((4/9+1/9+1/9)/2) = sqrt(1/3) = 0.5773503.
		{"Unbiased", []float64{1, 0, 0}, unbiased, []float64{1.1546985384, -0.5773492692, -0.5773492692}},
		{"NoNormalization", []float64{1, 0, 0}, drGRPO, []float64{2.0 / 3, -1.0 / 3, -1.0 / 3}},
		// Leave-one-out baselines: 0, 1/2, 1/2.
		{"LeaveOneOut", []float64{1, 0, 0}, rloo, []float64{1, -0.5, -0.5}},
		{"LeaveOneOutPopulation", []float64{1, 0, 0}, rlooPop, []float64{2.1213158436, -1.0606579218, -1.0606579218}},
		{"LeaveOneOutUnbiased", []float64{1, 0, 0}, rlooUnbia, []float64{1.7320478076, -0.8660239038, -0.8660239038}},
		// [1,2,3,4]: mean 2.5, population variance 1.25, std 1.1180340;
		// -1.5/(1.1180340+1e-6) = -1.3416396.
		{"FourPopulation", []float64{1, 2, 3, 4}, grpoOpt, []float64{-1.3416395865, -0.4472131955, 0.4472131955, 1.3416395865}},
		// Baseline for 1 is (2+3+4)/3 = 3, so 1-3 = -2; for 2 it is 8/3.
		{"FourLeaveOneOut", []float64{1, 2, 3, 4}, rloo, []float64{-2, -2.0 / 3, 2.0 / 3, 2}},
		// Unbiased variance 5/3, std 1.2909944; -2/(1.2909944+1e-6) = -1.5491921.
		{"FourLeaveOneOutUnbiased", []float64{1, 2, 3, 4}, rlooUnbia, []float64{-1.5491921385, -0.5163973795, 0.5163973795, 1.5491921385}},
		// Rewards of DESIGN §3 (silent policy -0.1, worked example 1.3275):
		// mean 0.3758333, population std 1.4275*sqrt(2)/3 = 0.6729300;
		// 0.9516667/(0.6729300+1e-6) = 1.4142115.
		{"Negative", []float64{-0.1, 1.3275, -0.1}, grpoOpt, []float64{-0.7071057304, 1.4142114608, -0.7071057304}},
		{"One", []float64{0.7}, grpoOpt, []float64{0}},
		{"OneLeaveOneOut", []float64{0.7}, rlooPop, []float64{0}},
		{"Empty", nil, grpoOpt, []float64{}},
		// Constant rewards carry no signal: exact zeros, not rounding noise
		// divided by 1e-6.
		{"Constant", []float64{0.1, 0.1, 0.1}, grpoOpt, []float64{0, 0, 0}},
		{"ConstantLeaveOneOut", []float64{0.1, 0.1, 0.1}, rlooPop, []float64{0, 0, 0}},
		{"WithinTolerance", []float64{0.5, 0.5 + 1e-10, 0.5}, grpoOpt, []float64{0, 0, 0}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := grpo.Advantages(tt.rewards, tt.opt)
			if len(got) != len(tt.want) {
				t.Fatalf("Advantages(%v)=%v, want %v", tt.rewards, got, tt.want)
			}
			for i := range got {
				tol := 1e-9
				if tt.want[i] == 0 {
					tol = 0
				}
				near(t, "advantage", got[i], tt.want[i], tol)
			}
		})
	}
}

func TestAdvantages_DoesNotModifyRewards(t *testing.T) {
	rewards := []float64{1, 0, 0}
	grpo.Advantages(rewards, grpo.DefaultAdvantageOptions())
	if rewards[0] != 1 || rewards[1] != 0 || rewards[2] != 0 {
		t.Fatalf("rewards changed to %v", rewards)
	}
}

func TestZeroVariance(t *testing.T) {
	for _, tt := range []struct {
		name    string
		rewards []float64
		want    bool
	}{
		{"Empty", nil, true},
		{"One", []float64{0.3}, true},
		{"Equal", []float64{1, 1, 1}, true},
		{"WithinTolerance", []float64{0.5, 0.5 + 9e-10, 0.5 - 1e-12}, true},
		{"Spread", []float64{0.5, 0.5 + 2e-9, 0.5}, false},
		{"Different", []float64{1, 0, 0}, false},
		{"Negative", []float64{-0.1, -0.1, -0.1}, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := grpo.ZeroVariance(tt.rewards); got != tt.want {
				t.Fatalf("ZeroVariance(%v)=%v, want %v", tt.rewards, got, tt.want)
			}
		})
	}
}

func TestAdvantageOptions_Validate(t *testing.T) {
	if err := grpo.DefaultAdvantageOptions().Validate(); err != nil {
		t.Fatalf("default options: %v", err)
	}
	if got, want := grpo.DefaultAdvantageOptions(), (grpo.AdvantageOptions{StdNormalize: true, Std: "population", Baseline: "mean"}); got != want {
		t.Fatalf("DefaultAdvantageOptions()=%+v, want %+v", got, want)
	}
	ok := grpo.AdvantageOptions{Std: "unbiased", Baseline: "leave-one-out"}
	if err := ok.Validate(); err != nil {
		t.Fatalf("%+v: %v", ok, err)
	}
	for _, tt := range []struct {
		name string
		opt  grpo.AdvantageOptions
		want []string // substrings of the error
	}{
		{"Std", grpo.AdvantageOptions{Std: "sample", Baseline: "mean"}, []string{"std", `"sample"`, `"population"`, `"unbiased"`}},
		{"EmptyStd", grpo.AdvantageOptions{Baseline: "mean"}, []string{"std", `""`, `"population"`}},
		{"Baseline", grpo.AdvantageOptions{Std: "population", Baseline: "rloo"}, []string{"baseline", `"rloo"`, `"mean"`, `"leave-one-out"`}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.opt.Validate()
			if err == nil {
				t.Fatalf("Validate(%+v)=nil, want an error", tt.opt)
			}
			for _, s := range tt.want {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("Validate(%+v)=%q, want it to mention %s", tt.opt, err, s)
				}
			}
		})
	}
}

func BenchmarkAdvantages(b *testing.B) {
	rewards := []float64{1.3275, -0.1, 0.4, 0.9, -0.1, 1.0}
	opt := grpo.DefaultAdvantageOptions()
	for b.Loop() {
		grpo.Advantages(rewards, opt)
	}
}

func TestParseStdAndBaseline(t *testing.T) {
	for _, s := range grpo.Stds {
		if got, err := grpo.ParseStd(string(s)); err != nil || got != s {
			t.Errorf("ParseStd(%q)=%q, %v", s, got, err)
		}
	}
	for _, b := range grpo.Baselines {
		if got, err := grpo.ParseBaseline(string(b)); err != nil || got != b {
			t.Errorf("ParseBaseline(%q)=%q, %v", b, got, err)
		}
	}
	if _, err := grpo.ParseStd("sample"); err == nil || err.Error() != `"sample" is not accepted; accepted: population, unbiased` {
		t.Errorf("ParseStd(sample)=%v", err)
	}
	if _, err := grpo.ParseBaseline("median"); err == nil || err.Error() != `"median" is not accepted; accepted: mean, leave-one-out` {
		t.Errorf("ParseBaseline(median)=%v", err)
	}
}
