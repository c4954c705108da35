// Package grpo holds group statistics, advantage estimators, and significance tests.
package grpo
