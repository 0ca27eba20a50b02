package main

import (
	_ "embed"
	"fmt"
	"os"

	"deeplink/internal/config"
)

// The configuration file's types, read by package config, which the edge
// host shares.
type (
	Config        = config.Config
	WebhookConfig = config.WebhookConfig
	StoreConfig   = config.StoreConfig
	AppsConfig    = config.AppsConfig
	Duration      = config.Duration
)

// demoConfig is served by a bare `go run .`: one store on 127.0.0.1 whose
// game authorize URL is the built-in demo game app, so the whole flow can be
// clicked through in a browser with nothing else running.
//
//go:embed demo.json
var demoConfig []byte

// LoadConfig reads the configuration file at path, or the embedded demo
// configuration when path is empty. The error names the bad field.
func LoadConfig(path string) (*Config, error) {
	b := demoConfig
	if path != "" {
		var err error
		if b, err = os.ReadFile(path); err != nil {
			return nil, fmt.Errorf("config: %w", err)
		}
	}
	return ParseConfig(b)
}

// ParseConfig parses and validates a configuration file's contents: see
// config.Parse.
func ParseConfig(b []byte) (*Config, error) { return config.Parse(b) }
