package main

import "testing"

func TestLoadConfigDemo(t *testing.T) {
	cfg, err := LoadConfig("")
	if err != nil {
		t.Fatalf(`LoadConfig("") error: %v; want the embedded demo configuration`, err)
	}
	if len(cfg.Stores) != 1 || len(cfg.Stores[0].APIKeys) == 0 {
		t.Errorf(`LoadConfig("").Stores = %+v; want one store with an API key`, cfg.Stores)
	}
}
