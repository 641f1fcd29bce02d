package testgen

// NewNull is `null`: features [N,16] → ReduceSum over the features → score
// [N,1]. A model that costs nothing, so a job running it measures the
// pipeline's own ceiling (read, encode, infer's plumbing, write). It is not
// in All: the test suites' model lists stay as they are.
func NewNull() *Model {
	const w = 16
	return &Model{
		Name:    "null",
		Doc:     "features [N,16] → ReduceSum → score [N,1] (the pipeline's own ceiling)",
		Input:   IO{Name: "features", Elem: Float, Dims: []int64{-1, w}},
		Outputs: []IO{{Name: "score", Elem: Float, Dims: []int64{-1, 1}}},
		graph: func() *Graph {
			g := NewGraph("null")
			g.Input("features", Float, -1, w)
			g.InitializerInt64("axes", []int64{1}, []int64{1})
			g.Node("ReduceSum", []string{"features", "axes"}, []string{"score"}, AttrInt("keepdims", 1))
			g.Output("score", Float, -1, 1)
			return g
		},
		ref: func(x []float32, n int) map[string]Tensor {
			y := make([]float32, n)
			for i := range n {
				var s float32
				for _, v := range x[i*w : (i+1)*w] {
					s += v
				}
				y[i] = s
			}
			return map[string]Tensor{"score": {Shape: []int64{int64(n), 1}, Float32: y}}
		},
	}
}
