package main

import ("context"; "errors")

func (h *harness) lookup(ctx context.Context) (*section, error) { return nil, errors.New("todo") }
