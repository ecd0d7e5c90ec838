"""numpy semantics of TF's unary special functions: lgamma, digamma, ndtri, erfinv,
bessel_i0e, bessel_i1e (f32, f64; TF's f16 kernels compute these in f32 and round).

TF's CPU kernels (cwise_op_lgamma.cc, cwise_op_digamma.cc, cwise_op_ndtri.cc,
cwise_op_erfinv.cc, cwise_op_bessel.cc) run Eigen's ``scalar_*_op`` over the
tensor; Eigen evaluates it with its AVX packet code where ``packet_traits<T>``
has one (TF's x86 wheels are built for AVX without FMA) and its scalar code
otherwise, and for the last ``n % 8`` elements of an f32 tensor in any case:

* lgamma, digamma: no packet version; the C library's ``lgammaf_r``/``lgamma_r``
  and Cephes' psi over ``logf``/``tanf`` (``log``/``tan``), in every dtype.
* ndtri, erfinv, bessel_i0e/i1e in f64: no packet version (``HasNdtri`` and
  ``HasBessel`` are set for float only); Eigen's generic code on scalars: the C
  library's ``log``, correctly rounded sqrt and division, ``a*b + c`` twice rounded.
* the same in f32: the packet path (Eigen's polynomial ``plog``, x86's
  ``rcpps``/``rsqrtps`` approximations refined by a Newton step) for all but the
  last ``n % 8`` elements, which take the scalar path (``logf``, ``1/x``,
  ``1/sqrt(x)``).  The compiled code follows the packet path (codegen/special_unary.py);
  this interpreter, which cannot run the CPU's approximation tables, follows the
  scalar path: it is TF's result for tensors of fewer than 8 elements (so constants
  folded while lowering are what TF computes for them), and within a few ulp of the
  packet path elsewhere.

Where the scalar code branches with ``pselect`` both sides are computed (they have
no side effects), as here.  Denormal operands read as zero (``interp._fpu``), except
lgamma's: the C library tests the operand's bits, which DAZ does not change.
"""
from __future__ import annotations

from fractions import Fraction

import numpy as np

from tfjit.ir.interp_special import _digamma, libm
from tfjit.ir.ops import Op


def _f32(literal: str) -> float:
    """A C ``float`` literal: the decimal rounded once to the nearest float32."""
    exact = Fraction(literal)
    guess = np.float32(float(literal))
    candidates = [np.nextafter(guess, np.float32(-np.inf)), guess, np.nextafter(guess, np.float32(np.inf))]
    return float(min(candidates, key=lambda c: (abs(Fraction(float(c)) - exact), int(c.view(np.uint32)) & 1)))


# Eigen's plog_impl_float (float literals)
SQRTHF = _f32("0.707106781186547524")
LOG_ALPHA = tuple(_f32(s) for s in ("0.18256296349849254", "1.0000000190281063", "1.0000000190281136"))
LOG_BETA = tuple(_f32(s) for s in ("0.049616247954120038", "0.59923249590823520",
                                   "1.4999999999999927", "1.0"))
LN2 = _f32("0.693147180559945309417232121458176568")      # static_cast<float>(EIGEN_LN2)

# generic_ndtri (double literals, cast to the element type)
EXP_NEG_TWO = 0.13533528323661269189
SQRT2PI = 2.50662827463100050242e0
SQRT1_2 = 0.70710678118654752440                            # M_SQRT1_2 (TF's erfinv)
NDTRI_P0 = (-5.99633501014107895267e1, 9.80010754185999661536e1, -5.66762857469070293439e1,
            1.39312609387279679503e1, -1.23916583867381258016e0)
NDTRI_Q0 = (1.0, 1.95448858338141759834e0, 4.67627912898881538453e0, 8.63602421390890590575e1,
            -2.25462687854119370527e2, 2.00260212380060660359e2, -8.20372256168333339912e1,
            1.59056225126211695515e1, -1.18331621121330003142e0)
NDTRI_P1 = (4.05544892305962419923e0, 3.15251094599893866154e1, 5.71628192246421288162e1,
            4.40805073893200834700e1, 1.46849561928858024014e1, 2.18663306850790267539e0,
            -1.40256079171354495875e-1, -3.50424626827848203418e-2, -8.57456785154685413611e-4)
NDTRI_Q1 = (1.0, 1.57799883256466749731e1, 4.53907635128879210584e1, 4.13172038254672030440e1,
            1.50425385692907503408e1, 2.50464946208309415979e0, -1.42182922854787788574e-1,
            -3.80806407691578277194e-2, -9.33259480895457427372e-4)
NDTRI_P2 = (3.23774891776946035970e0, 6.91522889068984211695e0, 3.93881025292474443415e0,
            1.33303460815807542389e0, 2.01485389549179081538e-1, 1.23716634817820021358e-2,
            3.01581553508235416007e-4, 2.65806974686737550832e-6, 6.23974539184983293730e-9)
NDTRI_Q2 = (1.0, 6.02427039364742014255e0, 3.67983563856160859403e0, 1.37702099489081330271e0,
            2.16236993594496635890e-1, 1.34204006088543189037e-2, 3.28014464682127739104e-4,
            2.89247864745380683936e-6, 6.79019408009981274425e-9)

# Cephes' Chebyshev series of i0e/i1e: f64 (Eigen's double tables); the f32 tables
# are their last 18/7 (i0e) and 17/7 (i1e) terms, written as float literals
_I0E_A = ("-4.41534164647933937950E-18 3.33079451882223809783E-17 -2.43127984654795469359E-16 "
          "1.71539128555513303061E-15 -1.16853328779934516808E-14 7.67618549860493561688E-14 "
          "-4.85644678311192946090E-13 2.95505266312963983461E-12 -1.72682629144155570723E-11 "
          "9.67580903537323691224E-11 -5.18979560163526290666E-10 2.65982372468238665035E-9 "
          "-1.30002500998624804212E-8 6.04699502254191894932E-8 -2.67079385394061173391E-7 "
          "1.11738753912010371815E-6 -4.41673835845875056359E-6 1.64484480707288970893E-5 "
          "-5.75419501008210370398E-5 1.88502885095841655729E-4 -5.76375574538582365885E-4 "
          "1.63947561694133579842E-3 -4.32430999505057594430E-3 1.05464603945949983183E-2 "
          "-2.37374148058994688156E-2 4.93052842396707084878E-2 -9.49010970480476444210E-2 "
          "1.71620901522208775349E-1 -3.04682672343198398683E-1 6.76795274409476084995E-1").split()
_I0E_B = ("-7.23318048787475395456E-18 -4.83050448594418207126E-18 4.46562142029675999901E-17 "
          "3.46122286769746109310E-17 -2.82762398051658348494E-16 -3.42548561967721913462E-16 "
          "1.77256013305652638360E-15 3.81168066935262242075E-15 -9.55484669882830764870E-15 "
          "-4.15056934728722208663E-14 1.54008621752140982691E-14 3.85277838274214270114E-13 "
          "7.18012445138366623367E-13 -1.79417853150680611778E-12 -1.32158118404477131188E-11 "
          "-3.14991652796324136454E-11 1.18891471078464383424E-11 4.94060238822496958910E-10 "
          "3.39623202570838634515E-9 2.26666899049817806459E-8 2.04891858946906374183E-7 "
          "2.89137052083475648297E-6 6.88975834691682398426E-5 3.36911647825569408990E-3 "
          "8.04490411014108831608E-1").split()
_I1E_A = ("2.77791411276104639959E-18 -2.11142121435816608115E-17 1.55363195773620046921E-16 "
          "-1.10559694773538630805E-15 7.60068429473540693410E-15 -5.04218550472791168711E-14 "
          "3.22379336594557470981E-13 -1.98397439776494371520E-12 1.17361862988909016308E-11 "
          "-6.66348972350202774223E-11 3.62559028155211703701E-10 -1.88724975172282928790E-9 "
          "9.38153738649577178388E-9 -4.44505912879632808065E-8 2.00329475355213526229E-7 "
          "-8.56872026469545474066E-7 3.47025130813767847674E-6 -1.32731636560394358279E-5 "
          "4.78156510755005422638E-5 -1.61760815825896745588E-4 5.12285956168575772895E-4 "
          "-1.51357245063125314899E-3 4.15642294431288815669E-3 -1.05640848946261981558E-2 "
          "2.47264490306265168283E-2 -5.29459812080949914269E-2 1.02643658689847095384E-1 "
          "-1.76416518357834055153E-1 2.52587186443633654823E-1").split()
_I1E_B = ("7.51729631084210481353E-18 4.41434832307170791151E-18 -4.65030536848935832153E-17 "
          "-3.20952592199342395980E-17 2.96262899764595013876E-16 3.30820231092092828324E-16 "
          "-1.88035477551078244854E-15 -3.81440307243700780478E-15 1.04202769841288027642E-14 "
          "4.27244001671195135429E-14 -2.10154184277266431302E-14 -4.08355111109219731823E-13 "
          "-7.19855177624590851209E-13 2.03562854414708950722E-12 1.41258074366137813316E-11 "
          "3.25260358301548823856E-11 -1.89749581235054123450E-11 -5.58974346219658380687E-10 "
          "-3.83538038596423702205E-9 -2.63146884688951950684E-8 -2.51223623787020892529E-7 "
          "-3.88256480887769039346E-6 -1.10588938762623716291E-4 -9.76109749136146840777E-3 "
          "7.78576235018280120474E-1").split()
_BESSEL = {0: (_I0E_A, _I0E_B, 18, 7), 1: (_I1E_A, _I1E_B, 17, 7)}


def bessel_coefficients(order: int, f32: bool) -> tuple:
    """(A, B): the Chebyshev coefficients of i{order}e for |x| <= 8 and > 8."""
    a, b, na, nb = _BESSEL[order]
    if f32:
        return tuple(_f32(s) for s in a[-na:]), tuple(_f32(s) for s in b[-nb:])
    return tuple(float(s) for s in a), tuple(float(s) for s in b)


def _polevl(x, coeffs):
    t = x.dtype.type
    acc = np.full_like(x, t(coeffs[0]))
    for c in coeffs[1:]:
        acc = acc * x + t(c)
    return acc


def _chebevl(x, coeffs):
    t = x.dtype.type
    b0, b1, b2 = np.full_like(x, t(coeffs[0])), np.zeros_like(x), np.zeros_like(x)
    for c in coeffs[1:]:
        b2, b1 = b1, b0
        b0 = (x * b1 + t(c)) - b2
    return t(0.5) * (b0 - b2)


def ndtri(a):
    t = a.dtype.type
    with np.errstate(all="ignore"):
        one, exp_neg_two = t(1), t(EXP_NEG_TWO)
        flip = a <= one - exp_neg_two
        b = np.where(flip, a, one - a)
        c = b - t(0.5)
        c2 = c * c
        gt = (c * (c2 * (_polevl(c2, NDTRI_P0) / _polevl(c2, NDTRI_Q0))) + c) * t(SQRT2PI)
        x = np.sqrt(t(-2) * libm("log", b))
        x0 = x - libm("log", x) / x
        z = one / x
        ratio = np.where(x < t(8), _polevl(z, NDTRI_P1) / _polevl(z, NDTRI_Q1),
                         _polevl(z, NDTRI_P2) / _polevl(z, NDTRI_Q2))
        lt = x0 - z * ratio
        lt = np.where(flip, -lt, lt)
        r = np.where(exp_neg_two < b, gt, lt)
        return np.where(a == 0, t(-np.inf), np.where(a == one, t(np.inf), r)).astype(a.dtype)


def erfinv(x):
    t = x.dtype.type
    return (ndtri(t(0.5) * x + t(0.5)) * t(SQRT1_2)).astype(x.dtype)


def _bessel(x, order: int):
    t = x.dtype.type
    A, B = bessel_coefficients(order, x.dtype == np.float32)
    with np.errstate(all="ignore"):
        y = np.abs(x)
        small = _chebevl(t(0.5) * y + t(-2), A)
        if order == 1:
            small = y * small
        large = _chebevl(t(32) / y - t(2), B) * (t(1) / np.sqrt(y))
        r = np.where(y <= t(8), small, large)
        if order == 1:
            r = np.where(x < 0, -r, r)
    return r.astype(x.dtype)


FUNCTIONS = {          # denormal operands read as zero (TF's DAZ), results flushed
    Op.DIGAMMA: _digamma,
    Op.NDTRI: ndtri,
    Op.ERFINV: erfinv,
    Op.BESSEL_I0E: lambda x: _bessel(x, 0),
    Op.BESSEL_I1E: lambda x: _bessel(x, 1),
}
RAW_OPERAND = {        # the C library's function of the operand's bits; results flushed
    Op.LGAMMA: lambda x: libm("lgamma", x),
}
