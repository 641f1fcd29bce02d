//go:build gpucheck

package objstore

// cloudDrivers: the GPU check build has no gs:// or azblob:// driver
// (drivers.go).
const cloudDrivers = false
