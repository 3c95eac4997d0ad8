package main

import "github.com/bothy/bothy/services/server/internal/httpapi"

// The HTTP API (/v1, River UI under /admin/river/) on the api role.
func init() { modules = append(modules, httpapi.NewModule) }
