package bench

import "context"

func cpuRow(ctx context.Context, o Options) ([]Result, error)               { return nil, nil }
func stepRow(ctx context.Context, o Options, llm string) ([]Result, error) { return nil, nil }
func storeRow(ctx context.Context, o Options) ([]Result, error)             { return nil, nil }
func memoryRow(ctx context.Context, o Options) ([]Result, error)            { return nil, nil }
