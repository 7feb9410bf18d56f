package main

import "github.com/warrenmq/warren/contract"

// OrderPlaced is the data of an order.placed event at version 1. Its
// contract is derived from it and kept in contracts/order.placed/1.json,
// which CI compares with main's (`warren contracts check`).
type OrderPlaced struct {
	ID    string `json:"id" jsonschema:"minLength=1"`
	Cents int    `json:"cents" jsonschema:"minimum=0"`
}

// Contracts are the contracts of the events this service writes and reads.
var Contracts = must(contract.NewSet(
	contract.MustOf[OrderPlaced]("order.placed", "1"),
))

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
