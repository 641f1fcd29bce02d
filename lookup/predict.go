package lookup

import (
	"context"
	"fmt"
	"net/http"
)

func (s *Server) predict(ctx context.Context, w *reqInfo, n *namespace, body []byte) {
	req, err := decodePredict(body, s.limits())
	if err != nil {
		writeErr(ctx, w, err)
		return
	}
	var rw *row
	lv := n.live.Load()
	if req.Inputs != nil || req.Columns != nil || req.Text != nil {
		if lv == nil {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("namespace %q has live inference off (serving.live: false)", n.name))
			return
		}
		x, err := lv.layout.rowFromPredict(req)
		if err != nil {
			writeErr(ctx, w, err)
			return
		}
		rw = &x
	}
	s.answerOne(ctx, w, oneKey{n: n, lv: lv, key: req.Key, in: rw, why: " and no inputs to compute one"})
}
