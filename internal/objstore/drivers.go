//go:build !gpucheck

package objstore

import (
	_ "gocloud.dev/blob/azureblob" // azblob:// through the default Azure credential chain
	_ "gocloud.dev/blob/gcsblob"   // gs:// through Application Default Credentials
)

// cloudDrivers: gs:// and azblob:// are compiled in. The GPU check build
// (-tags gpucheck) leaves them out, with the gRPC, xDS and Azure code they
// pull in (a quarter of the binary), to fit the GPU check's bundle.
const cloudDrivers = true
