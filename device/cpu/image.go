package cpu

import (
	"math"

	"github.com/tolaria-ml/tolaria/device"
)

// The image kernels of the device contract (device.ImageKernels): im2col
// and its adjoint, and max and average pooling, over NHWC activations.
//
// Every kernel splits only over outputs that do not depend on each other,
// so its bits never depend on the thread count. The forward kernels split
// over output pixels. The backward kernels write the input gradient and
// split over input rows (n, h): a part clears its rows, then walks the
// output pixels whose windows reach them in increasing (oh, ow) order and
// adds each contribution that lands in them, so every element receives its
// terms in the order the contract gives, starting from zero, whichever
// part runs it. A window's terms are added in float32: the contract asks
// for double only where a sum runs over more than a window.

// window is the geometry common to convolution and pooling windows: the
// input image, the output grid, the window and its placement.
type window struct {
	n, h, w, c     int // input
	oh, ow         int // output grid
	kh, kw         int // window
	stride, pad    int
	outPixels      int // n·oh·ow
	inRows         int // n·h, the units of the backward kernels
	imgRow, pixels int // w·c, the elements of an input row; oh·ow per image
}

func convWindow(s device.ConvShape) window {
	return newWindow(s.N, s.H, s.W, s.C, s.OutH(), s.OutW(), s.KH, s.KW, s.Stride, s.Pad)
}

func poolWindow(s device.PoolShape) window {
	return newWindow(s.N, s.H, s.W, s.C, s.OutH(), s.OutW(), s.K, s.K, s.Stride, s.Pad)
}

func newWindow(n, h, w, c, oh, ow, kh, kw, stride, pad int) window {
	return window{n: n, h: h, w: w, c: c, oh: oh, ow: ow, kh: kh, kw: kw, stride: stride, pad: pad,
		outPixels: n * oh * ow, inRows: n * h, imgRow: w * c, pixels: oh * ow}
}

// span returns the input coordinates of output pixel (oh, ow)'s top-left
// corner (negative in the padding) and the ranges of window rows and
// columns that fall inside the image. The ranges are never empty: the
// shape checks keep the padding smaller than the window (and, for
// pooling, at most half of it).
func (g *window) span(oh, ow int) (y0, x0, kh0, kh1, kw0, kw1 int) {
	y0, x0 = oh*g.stride-g.pad, ow*g.stride-g.pad
	return y0, x0, max(0, -y0), min(g.kh, g.h-y0), max(0, -x0), min(g.kw, g.w-x0)
}

// pixel is the offset of input pixel (n, y, x) in an NHWC buffer.
func (g *window) pixel(n, y, x int) int { return ((n*g.h+y)*g.w + x) * g.c }

// eachOutPixel calls fn for the output pixels lo..hi in order, with each one's
// index, image and grid position: the position is stepped, not divided out
// of the index, as a division per pixel costs more than a small kernel's
// copy of it.
func (g *window) eachOutPixel(lo, hi int, fn func(p, n, oh, ow int)) {
	if lo >= hi {
		return
	}
	n, q := lo/g.pixels, lo%g.pixels
	oh, ow := q/g.ow, q%g.ow
	for p := lo; p < hi; p++ {
		fn(p, n, oh, ow)
		if ow++; ow == g.ow {
			ow = 0
			if oh++; oh == g.oh {
				oh = 0
				n++
			}
		}
	}
}

// outRows returns, for the input rows [h0, h1) of one image, the output
// rows whose windows reach them: oh·stride-pad+kh in [h0, h1) for some kh.
func (g *window) outRows(h0, h1 int) (lo, hi int) {
	if num := h0 + g.pad - g.kh + 1; num > 0 {
		lo = (num + g.stride - 1) / g.stride
	}
	return lo, min(g.oh, (h1-1+g.pad)/g.stride+1)
}

// eachInputRows calls fn for each image's share of the input rows [lo, hi)
// (n·h units): the image and its rows [h0, h1).
func (g *window) eachInputRows(lo, hi int, fn func(n, h0, h1 int)) {
	for u := lo; u < hi; {
		n, h0 := u/g.h, u%g.h
		h1 := min(g.h, h0+hi-u)
		fn(n, h0, h1)
		u += h1 - h0
	}
}

// zeroRun clears dst; most runs a kernel clears are empty (no padding).
func zeroRun(dst []float32) {
	if len(dst) > 0 {
		clear(dst)
	}
}

// shortRun is the length below which a loop copies faster than memmove.
const shortRun = 16

// copyRun copies a run of a window row; runs are often a few elements
// (one channel, a 3-wide kernel), where a loop beats memmove's call.
func copyRun(dst, src []float32) {
	if len(src) < shortRun {
		dst = dst[:len(src)]
		//lint:ignore S1001 memmove's call costs more than these few elements
		for i, v := range src {
			dst[i] = v
		}
		return
	}
	copy(dst, src)
}

// addRun adds src to dst elementwise, over dst's length.
func addRun(dst, src []float32) {
	src = src[:len(dst)]
	i := 0
	if n := len(dst) &^ 15; n > 0 && haveImageKernel() {
		add16(&dst[0], &src[0], n)
		i = n
	}
	for ; i < len(dst); i++ {
		dst[i] += src[i]
	}
}

// im2col writes the rows lo..hi of the im2col matrix. A window inside the
// image is KH runs of the input, one per window row; with table, made by
// windowTable when those runs are short, it is gathered element by element
// instead, which takes a third of the time for one channel. A window over
// the padding is copied run by run (its columns inside the image, all
// channels) with zeros elsewhere.
func im2col(g *window, x, cols []float32, table []int, lo, hi int) {
	rowLen := g.kw * g.c
	ncols := g.kh * rowLen
	g.eachOutPixel(lo, hi, func(p, n, oh, ow int) {
		y0, x0, kh0, kh1, kw0, kw1 := g.span(oh, ow)
		out := cols[p*ncols : (p+1)*ncols]
		if kh0 == 0 && kh1 == g.kh && kw0 == 0 && kw1 == g.kw {
			src := g.pixel(n, y0, x0)
			if g.c == 1 && g.kh == 3 && g.kw == 3 {
				window3(out, x[src:], g.imgRow)
				return
			}
			if table != nil {
				gather(out, x[src:], table)
				return
			}
			for kh := range g.kh {
				copy(out[kh*rowLen:(kh+1)*rowLen], x[src:src+rowLen])
				src += g.imgRow
			}
			return
		}
		zeroRun(out[:kh0*rowLen])
		for kh := kh0; kh < kh1; kh++ {
			dst := out[kh*rowLen : (kh+1)*rowLen]
			zeroRun(dst[:kw0*g.c])
			src := g.pixel(n, y0+kh, x0+kw0)
			copyRun(dst[kw0*g.c:], x[src:src+(kw1-kw0)*g.c])
			zeroRun(dst[kw1*g.c:])
		}
		zeroRun(out[kh1*rowLen:])
	})
}

// windowTable returns, when a window's rows are shorter than copyRun's
// threshold, the offset of each of its elements from its first, in
// im2col's column order; else nil.
func windowTable(g *window) []int {
	if g.kw*g.c >= shortRun {
		return nil
	}
	table := make([]int, 0, g.kh*g.kw*g.c)
	for kh := range g.kh {
		for kw := range g.kw {
			for c := range g.c {
				table = append(table, g.pixel(0, kh, kw)+c)
			}
		}
	}
	return table
}

// window3 writes a 3×3 window of one channel, its rows w apart in src:
// gather's copy for a first convolution's window, without its table.
func window3(dst, src []float32, w int) {
	dst = dst[:9:9]
	r0, r1, r2 := src[:3:3], src[w:w+3:w+3], src[2*w:2*w+3:2*w+3]
	dst[0], dst[1], dst[2] = r0[0], r0[1], r0[2]
	dst[3], dst[4], dst[5] = r1[0], r1[1], r1[2]
	dst[6], dst[7], dst[8] = r2[0], r2[1], r2[2]
}

// gather writes dst[j] = src[table[j]].
func gather(dst, src []float32, table []int) {
	dst = dst[:len(table)]
	for j, off := range table {
		dst[j] = src[off]
	}
}

// col2im writes the input rows lo..hi (n·h units) of dx from dcols.
func col2im(g *window, dcols, dx []float32, lo, hi int) {
	rowLen := g.kw * g.c
	ncols := g.kh * rowLen
	g.eachInputRows(lo, hi, func(n, h0, h1 int) {
		clear(dx[g.pixel(n, h0, 0):g.pixel(n, h1, 0)])
		oh0, oh1 := g.outRows(h0, h1)
		for oh := oh0; oh < oh1; oh++ {
			for ow := range g.ow {
				y0, x0, kh0, kh1, kw0, kw1 := g.span(oh, ow)
				p := (n*g.oh+oh)*g.ow + ow
				row := dcols[p*ncols : (p+1)*ncols]
				for kh := max(kh0, h0-y0); kh < min(kh1, h1-y0); kh++ {
					dst := g.pixel(n, y0+kh, x0+kw0)
					addRun(dx[dst:dst+(kw1-kw0)*g.c], row[kh*rowLen+kw0*g.c:])
				}
			}
		}
	})
}

// poolBlock is how many channels maxPool keeps its running maxima of at
// once, on the stack.
const poolBlock = 64

// maxPool writes the output pixels lo..hi of y and arg. A NaN wins over
// every number and the first NaN over later ones, so that a NaN in the
// activations reaches the loss rather than vanish in a window.
//
// The running maximum and its position are chosen by masks of bits rather
// than branches: on activations the comparison goes either way at random,
// and with a branch per element the 2×2 pool of a 64×28×28×32 input took
// 6.6 ms on one thread of the development machine, against 4.1 ms so.
func maxPool(g *window, x, y, arg []float32, lo, hi int) {
	var bestBlock [poolBlock]float32
	var posBlock [poolBlock]uint32
	wide := haveImageKernel() && g.c%16 == 0
	g.eachOutPixel(lo, hi, func(p, n, oh, ow int) {
		y0, x0, kh0, kh1, kw0, kw1 := g.span(oh, ow)
		if wide {
			// The same choices sixteen channels at a time (image_amd64.s).
			src, out := g.pixel(n, y0+kh0, x0+kw0), p*g.c
			maxPool16(&x[src], uintptr(4*g.c), uintptr(4*g.imgRow), kh1-kh0, kw1-kw0,
				float32(kh0*g.kw+kw0), float32(g.kw), &y[out], &arg[out], g.c/16)
			return
		}
		for c0 := 0; c0 < g.c; c0 += poolBlock {
			w := min(poolBlock, g.c-c0)
			best, pos := bestBlock[:w], posBlock[:w]
			first := true
			for kh := kh0; kh < kh1; kh++ {
				for kw := kw0; kw < kw1; kw++ {
					src := g.pixel(n, y0+kh, x0+kw) + c0
					px := x[src : src+w]
					at := uint32(kh*g.kw + kw)
					if first {
						copy(best, px)
						for c := range pos {
							pos[c] = at
						}
						first = false
						continue
					}
					for c, v := range px {
						b := best[c]
						// All ones when v takes over: larger, or the first NaN.
						take := -(bit(v > b) | bit(v != v)&bit(b == b))
						best[c] = math.Float32frombits(math.Float32bits(v)&take | math.Float32bits(b)&^take)
						pos[c] = at&take | pos[c]&^take
					}
				}
			}
			out := p*g.c + c0
			copy(y[out:out+w], best)
			ap := arg[out : out+w]
			for c, at := range pos {
				ap[c] = float32(at)
			}
		}
	})
}

// bit is 1 for true and 0 for false, set from the flags without a branch.
func bit(b bool) uint32 {
	if b {
		return 1
	}
	return 0
}

// maxPoolGrad writes the input rows lo..hi of dx. An arg that is not a
// window position inside the image (not written by MaxPool) adds nothing.
//
// at holds each window position's row and column (kh, kw), so that no
// element divides its position.
func maxPoolGrad(g *window, dy, arg, dx []float32, at []int, lo, hi int) {
	if g.tiles() {
		maxPoolGradTiled(g, dy, arg, dx, lo, hi, haveImageKernel() && g.c%16 == 0)
		return
	}
	maxPoolGradWindows(g, dy, arg, dx, at, lo, hi)
}

// maxPoolGradWindows is maxPoolGrad for any windows: it clears its rows
// of dx and adds each window's term where arg names a position in them.
func maxPoolGradWindows(g *window, dy, arg, dx []float32, at []int, lo, hi int) {
	size := float32(g.kh * g.kw)
	g.eachInputRows(lo, hi, func(n, h0, h1 int) {
		clear(dx[g.pixel(n, h0, 0):g.pixel(n, h1, 0)])
		oh0, oh1 := g.outRows(h0, h1)
		for oh := oh0; oh < oh1; oh++ {
			for ow := range g.ow {
				y0, x0, _, _, _, _ := g.span(oh, ow)
				p := (n*g.oh+oh)*g.ow + ow
				dp, ap := dy[p*g.c:(p+1)*g.c], arg[p*g.c:(p+1)*g.c]
				for c, a := range ap[:len(dp)] {
					if !(a >= 0 && a < size) {
						continue
					}
					pos := 2 * int(a)
					yi, xi := y0+at[pos], x0+at[pos+1]
					if yi < h0 || yi >= h1 || xi < 0 || xi >= g.w {
						continue
					}
					dx[g.pixel(n, yi, xi)+c] += dp[c]
				}
			}
		}
	})
}

// tiles says whether the windows tile the image: stride the window's
// size, no padding, and the image a whole number of windows, so that each
// input pixel lies in one window exactly (the CNN's 2×2 pools).
func (g *window) tiles() bool {
	return g.kh == g.kw && g.stride == g.kh && g.pad == 0 && g.oh*g.kh == g.h && g.ow*g.kw == g.w
}

// maxPoolGradTiled is maxPoolGrad where the windows tile the image: each
// element of dx gets its window's term, 0 + dy, where arg names its
// position, and 0 otherwise, with the same tests of arg. It writes each
// element of dx once, in order, rather than clearing dx and adding the
// terms; the bits are the same. wide runs the rows in AVX-512
// (maxPoolGradRow16), for channels a multiple of 16.
func maxPoolGradTiled(g *window, dy, arg, dx []float32, lo, hi int, wide bool) {
	k, size := g.kh, float32(g.kh*g.kw)
	g.eachInputRows(lo, hi, func(n, h0, h1 int) {
		for y := h0; y < h1; y++ {
			oh, kh := y/k, y%k
			p0 := (n*g.oh + oh) * g.ow
			out := dx[g.pixel(n, y, 0):g.pixel(n, y+1, 0)]
			if wide {
				maxPoolGradRow16(&dy[p0*g.c], &arg[p0*g.c], &out[0], g.ow, k, kh*k, g.c/16)
				continue
			}
			for x := range g.w {
				p, pos := p0+x/k, kh*k+x%k
				dp, ap, dxp := dy[p*g.c:(p+1)*g.c], arg[p*g.c:(p+1)*g.c], out[x*g.c:(x+1)*g.c]
				for c, a := range ap {
					var v float32
					if a >= 0 && a < size && int(a) == pos {
						v += dp[c]
					}
					dxp[c] = v
				}
			}
		}
	})
}

// windowPositions lists each position kh·k+kw of a k×k window as its row
// and column: kh, kw.
func windowPositions(k int) []int {
	at := make([]int, 0, 2*k*k)
	for pos := range k * k {
		at = append(at, pos/k, pos%k)
	}
	return at
}

// avgPool writes the output pixels lo..hi of y: each window's sum in
// (kh, kw) order, from zero, divided by the window's size.
func avgPool(g *window, x, y []float32, lo, hi int) {
	area := float32(g.kh * g.kw)
	g.eachOutPixel(lo, hi, func(p, n, oh, ow int) {
		y0, x0, kh0, kh1, kw0, kw1 := g.span(oh, ow)
		yp := y[p*g.c : (p+1)*g.c]
		clear(yp)
		for kh := kh0; kh < kh1; kh++ {
			for kw := kw0; kw < kw1; kw++ {
				src := g.pixel(n, y0+kh, x0+kw)
				addRun(yp, x[src:])
			}
		}
		for c := range yp {
			yp[c] /= area
		}
	})
}

// avgPoolGrad writes the input rows lo..hi of dx: each window adds
// dy/(K·K) to every pixel of it inside the image.
func avgPoolGrad(g *window, dy, dx []float32, lo, hi int) {
	area := float32(g.kh * g.kw)
	g.eachInputRows(lo, hi, func(n, h0, h1 int) {
		clear(dx[g.pixel(n, h0, 0):g.pixel(n, h1, 0)])
		oh0, oh1 := g.outRows(h0, h1)
		for oh := oh0; oh < oh1; oh++ {
			for ow := range g.ow {
				y0, x0, kh0, kh1, kw0, kw1 := g.span(oh, ow)
				p := (n*g.oh+oh)*g.ow + ow
				dp := dy[p*g.c : (p+1)*g.c]
				for kh := max(kh0, h0-y0); kh < min(kh1, h1-y0); kh++ {
					for kw := kw0; kw < kw1; kw++ {
						dst := dx[g.pixel(n, y0+kh, x0+kw):][:len(dp)]
						for c, d := range dp {
							dst[c] += d / area
						}
					}
				}
			}
		}
	})
}

// overPixels makes a kernel split over the output pixels of g, each of
// cost element operations.
func overPixels(g *window, cost int, fn func(lo, hi int)) func(*team) {
	r := &rangeTask{total: g.outPixels, align: 1, cost: cost, grain: elemGrain, fn: fn}
	return r.run
}

// overInputRows makes a kernel split over the input rows (n, h) of g, each
// of cost element operations.
func overInputRows(g *window, cost int, fn func(lo, hi int)) func(*team) {
	r := &rangeTask{total: g.inRows, align: 1, cost: cost, grain: elemGrain, fn: fn}
	return r.run
}

func (s *stream) Im2Col(cs device.ConvShape, x, cols device.Buffer) error {
	return s.launch("Im2Col", device.CheckIm2Col(cs, x, cols), func(v [][]float32) func(*team) {
		g, x, cols := convWindow(cs), v[0], v[1]
		table := windowTable(&g)
		return overPixels(&g, cs.Cols(), func(lo, hi int) { im2col(&g, x, cols, table, lo, hi) })
	}, x, cols)
}

func (s *stream) Col2Im(cs device.ConvShape, dcols, dx device.Buffer) error {
	return s.launch("Col2Im", device.CheckIm2Col(cs, dx, dcols), func(v [][]float32) func(*team) {
		g, dcols, dx := convWindow(cs), v[0], v[1]
		cost := g.imgRow * cs.KH * cs.KW / (cs.Stride * cs.Stride)
		return overInputRows(&g, max(cost, g.imgRow), func(lo, hi int) { col2im(&g, dcols, dx, lo, hi) })
	}, dcols, dx)
}

func (s *stream) MaxPool(ps device.PoolShape, x, y, arg device.Buffer) error {
	check := device.CheckPool(ps, x, y, arg)
	if check == nil && arg.IsZero() {
		check = errorf("arg is the zero Buffer")
	}
	return s.launch("MaxPool", check, func(v [][]float32) func(*team) {
		g, x, y, arg := poolWindow(ps), v[0], v[1], v[2]
		return overPixels(&g, ps.K*ps.K*ps.C, func(lo, hi int) { maxPool(&g, x, y, arg, lo, hi) })
	}, x, y, arg)
}

func (s *stream) MaxPoolGrad(ps device.PoolShape, dy, arg, dx device.Buffer) error {
	check := device.CheckPool(ps, dx, dy, arg)
	if check == nil && arg.IsZero() {
		check = errorf("arg is the zero Buffer")
	}
	return s.launch("MaxPoolGrad", check, func(v [][]float32) func(*team) {
		g, dy, arg, dx := poolWindow(ps), v[0], v[1], v[2]
		cost := g.imgRow + g.ow*g.c*ceilDiv(ps.K, ps.Stride)
		at := windowPositions(ps.K)
		return overInputRows(&g, cost, func(lo, hi int) { maxPoolGrad(&g, dy, arg, dx, at, lo, hi) })
	}, dy, arg, dx)
}

func (s *stream) AvgPool(ps device.PoolShape, x, y device.Buffer) error {
	return s.launch("AvgPool", device.CheckPool(ps, x, y, device.Buffer{}), func(v [][]float32) func(*team) {
		g, x, y := poolWindow(ps), v[0], v[1]
		return overPixels(&g, ps.K*ps.K*ps.C, func(lo, hi int) { avgPool(&g, x, y, lo, hi) })
	}, x, y)
}

func (s *stream) AvgPoolGrad(ps device.PoolShape, dy, dx device.Buffer) error {
	return s.launch("AvgPoolGrad", device.CheckPool(ps, dx, dy, device.Buffer{}), func(v [][]float32) func(*team) {
		g, dy, dx := poolWindow(ps), v[0], v[1]
		cost := g.imgRow * ceilDiv(ps.K, ps.Stride) * ps.K
		return overInputRows(&g, cost, func(lo, hi int) { avgPoolGrad(&g, dy, dx, lo, hi) })
	}, dy, dx)
}

func ceilDiv(a, b int) int { return (a + b - 1) / b }
