package model

// ONNX protobuf field numbers (onnx/onnx.proto3), the one list for every
// reader and writer of model bytes in this package (inspect, FLOPs
// estimate, pooling appended to the graph, the float16 rewrite).
const (
	fModelIRVersion = 1
	fModelGraph     = 7

	fGraphInitializer = 5
	fGraphInput       = 11
	fGraphOutput      = 12

	fTensorName = 8

	fValueName = 1
	fValueType = 2

	fTypeTensor       = 1
	fTypeSequence     = 4
	fTypeMap          = 5
	fTypeSparseTensor = 8
	fTypeOptional     = 9

	fTensorTypeElem  = 1
	fTensorTypeShape = 2
	fShapeDim        = 1
	fDimValue        = 1

	fSeqElem     = 1
	fMapKey      = 1
	fMapValue    = 2
	fOptElem     = 1
	fSparseElem  = 1
	fSparseShape = 2

	fModelOpset   = 8 // ModelProto.opset_import
	fOpsetDomain  = 1
	fOpsetVersion = 2

	fGraphNode = 1

	fNodeInput  = 1
	fNodeOutput = 2
	fNodeName   = 3
	fNodeOpType = 4
	fNodeAttr   = 5

	fAttrName = 1
	fAttrI    = 3
	fAttrInts = 8
	fAttrType = 20

	fTensorDims     = 1
	fTensorDataType = 2
	fTensorRaw      = 9

	attrTypeInt  = 2
	attrTypeInts = 7

	onnxFloat = 1
	onnxInt64 = 7
	onnxBool  = 9

	// For the float16 rewrite (fp16.go).
	fGraphValueInfo  = 13
	fNodeDomain      = 7
	fAttrT           = 5
	fAttrG           = 6
	fAttrGraphs      = 11
	fTensorFloatData = 4
	fTensorExternal  = 13
	fTensorLocation  = 14
	attrTypeTensor   = 4
	onnxFloat16      = 10
	onnxUnknown      = 0 // an element type the rewrite cannot follow
)
